"""Which trial a model call belongs to, for in-process providers that need the task.

The runner registers each trial under a key and the model client passes that key with every
call (litellm `metadata`); `mock/oracle` and `mock/sim` use it to find the task they play.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optimizer.types import Task

METADATA_KEY = "optimizer_trial"
PROPOSAL_KEY = "optimizer_proposal"
"""Metadata of a patcher call: the proposal's ordinal (which entry `mock/patcher` answers with)."""
SCRIPT_KEY = "optimizer_patcher_script"
"""Metadata of a patcher call: the `mock/patcher` script file."""
SKILL_KEY = "optimizer_patcher_skill"
"""Metadata of a patcher call: the weak `mock/patcher`'s skill (`mock_patcher_skill`)."""
ALLOWED_TOOLS_KEY = "optimizer_allowed_tools"
"""Request metadata holding an OpenAI `allowed_tools` choice, for a provider that
`lists_every_tool`: the only tools a reply may call (each perhaps with a narrower schema of its
arguments), while the prompt lists them all as declared."""
SEED_KEY = "optimizer_patcher_seed"
"""Metadata of a patcher call: the settings' seed, which the weak `mock/patcher` draws from."""


@dataclass(frozen=True)
class TrialContext:
    task: "Task"
    agent_name: str
    trial_index: int
    seed: int
    sim_noise: str = "paired"
    """How `mock/sim` draws this trial's outcome (setting `sim_noise`, see `optimizer.trials.sim`)."""
    sim_profile: Any = None
    """The agent's `optimizer.trials.sim.SimProfile`, which `mock/sim` plays (None: the agent has none)."""
    replay: Any = None
    """The agent's `AgentEntry.replay`: how the scripted mocks make a script's calls (None: as written)."""


_lock = threading.Lock()
_trials: dict[str, TrialContext] = {}


def register_trial(key: str, context: TrialContext) -> None:
    with _lock:
        _trials[key] = context


def unregister_trial(key: str) -> None:
    with _lock:
        _trials.pop(key, None)


def trial_context(key: str | None) -> TrialContext | None:
    with _lock:
        return _trials.get(key) if key else None
JUDGE_KEY = "optimizer_judge"
"""Metadata of a judge call: the judge's name (the mock models answer it offline)."""
JUDGE_INPUTS_KEY = "optimizer_judge_inputs"
"""Metadata of a judge call: the inputs the judge was given."""
