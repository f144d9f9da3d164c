"""The closed vocabularies of timeline cards."""

TEMPLATE_IDS = (
    "link", "person", "place", "spec_sheet", "transaction", "metric", "rating", "mood", "progress", "event",
    "duration", "task", "routine", "procedure", "compact", "snippet", "article", "conversation", "quote",
    "snapshot", "gallery", "video",
)

TAGS = ("Project", "Trip", "Milestone", "Health", "Relationship", "Finance", "Knowledge", "Emotion", "Visual",
        "Audio")
