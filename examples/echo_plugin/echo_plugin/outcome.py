"""The echo agent's outcome: what the agent and its grader share, and nothing else."""

from __future__ import annotations

from optimizer import OutcomeModel


class EchoOutcome(OutcomeModel):
    reply: str | None = None
    """The reply the agent saved last; None when it saved none."""
    saves: int = 0
    """How many replies it saved."""
