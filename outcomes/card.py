"""The Card Agent's outcome: the card file the save tool wrote, as the card graders read it; and
the card format's template ids, which the agent's save tool and the template grader both use."""

from __future__ import annotations

from pydantic import Field

from optimizer import OutcomeModel

TEMPLATE_IDS = (
    "link", "person", "place", "spec_sheet", "transaction", "metric", "rating", "mood", "progress", "event",
    "duration", "task", "routine", "procedure", "compact", "snippet", "article", "conversation", "quote",
    "snapshot", "gallery", "video",
)


class CardOutcome(OutcomeModel):
    """The saved card (the graders read this, never the chat reply)."""

    saved: bool = False
    """A card file exists at the input's path."""
    card_path: str | None = None
    """`Cards/YYYY/MM/DD_ts_N.yaml`, relative to the workspace; None when nothing was saved."""
    is_complete: bool = False
    """Saved and nothing missing: completed, titled, with a ui_config and the input's fact_id."""
    status: str | None = None
    """The card's `status`; `failed` when no card was saved."""
    title: str | None = None
    fact_id: str | None = None
    """The card's `fact_id`."""
    expected_fact_id: str | None = None
    """The input's fact_id (Raw Input ID)."""
    template_ids: list[str | None] = Field(default_factory=list)
    """The `template_id` of each ui_config, in order (the first is the primary template)."""
    card_tags: list[str] = Field(default_factory=list)
    raw_yaml: str = ""
    """The card file's text, as saved."""
    save_errors: list[list[str]] = Field(default_factory=list)
    """The problems of each save the tool refused, in order."""
