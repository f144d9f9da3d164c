"""What the harness hands an agent for one trial, and what it expects back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from optimizer.errors import DeadlinePassed
from optimizer.models.client import ModelClient
from optimizer.types import Outcome, Task, Transcript


@dataclass
class AgentContext:
    """One trial's inputs.

    The workspace is a fresh temporary folder holding the task's fixture; the agent may write
    only inside it. `system_prompt` is the text of the agent's prompt file as found in the
    project being evaluated (a git worktree during optimization), never the installed copy.
    """

    task: Task
    workspace: Path
    system_prompt: str
    model: ModelClient
    trial_index: int
    deadline: float

    def check_deadline(self) -> None:
        """Call between model calls: past the deadline the trial is cut short: failed with score 0
        when the agent used the time up, errored when the model answered nothing or far slower
        than it normally does (`ModelClient.spoiled`). The model client's deadline counts when it
        has one: it moves back by the time a call waited for litellm's import (see
        `ModelClient`); a stand-in model in a test has none."""
        if time.monotonic() >= (getattr(self.model, "deadline", None) or self.deadline):
            raise DeadlinePassed(f"ran past timeout_seconds={self.task.timeout_seconds} "
                                 "while the model kept answering")


@dataclass
class AgentRun:
    transcript: Transcript
    outcome: Outcome
