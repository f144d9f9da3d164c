"""What the harness hands an agent for one trial, and what it expects back."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from optimizer.errors import TrialTimeout
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
        if time.monotonic() >= self.deadline:
            raise TrialTimeout(f"trial of {self.task.id!r} ran past timeout_seconds={self.task.timeout_seconds}")


@dataclass
class AgentRun:
    transcript: Transcript
    outcome: Outcome
