"""The closed vocabularies of timeline cards (the template ids are the card format's, shared with
the graders in `prompt_optimizer_outcomes.card`)."""

from prompt_optimizer_outcomes.card import TEMPLATE_IDS

__all__ = ["TAGS", "TEMPLATE_IDS"]

TAGS = ("Project", "Trip", "Milestone", "Health", "Relationship", "Finance", "Knowledge", "Emotion", "Visual",
        "Audio")
