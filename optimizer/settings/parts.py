"""The settings each layer receives: typed, frozen parts of `optimizer.settings.config.Settings`.

`Settings` is the one record a user writes (`[tool.optimizer]`, `OPTIMIZER_*`, flags) and the
one that is validated and stored with a run. A layer is handed only its part of it
(`Settings.runner`, `.proposal`, `.gate_policy`, ...), so what a layer can read is its
signature, and a change to one layer's settings cannot reach another unseen. The simulator's
knobs (`SimSettings`) are a part of their own, read only by the mock models they drive. Each
part's fields have the names of the settings they come from (docs/settings.md).

This module imports nothing of the project, so every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

DEFAULT_STATE_DIR = ".optimizer"
"""`state_dir`'s default: the store, trial workspaces' records and nightly state, under the project."""


@dataclass(frozen=True)
class SimSettings:
    """Knobs of the simulated models alone (`mock/sim`, the weak `mock/patcher`): no production
    model reads them."""

    sim_noise: str = "paired"
    """Where `mock/sim` draws a trial's outcome from (`optimizer.trials.sim`)."""
    mock_patcher_script: str | None = None
    """JSON file of scripted proposals answered by `mock/patcher`."""
    mock_patcher_skill: float | None = None
    """`mock/patcher` as a weak patcher of `mock/sim` agents (`optimizer.proposal.weak_patcher`)."""


@dataclass(frozen=True)
class ModelSettings:
    """Which models play each role, and how they are called."""

    agent_model: str
    judge_model: str
    patcher_model: str
    temperature: float | None = None
    seed: int = 0
    retry_attempts: int = 4
    retry_base_delay: float = 1.0
    cache: bool = True


@dataclass(frozen=True)
class ProviderSettings:
    """What a model provider's `configure` hook is handed (`optimizer.Provider.configure`): the
    models of each role and how they are called, how many trials run at once, and how many
    sequences a server on this machine decodes at once. A provider reads its sizing here; the
    loop's, the gate's and the proposer's settings are not its business."""

    models: ModelSettings
    concurrency: int = 8
    local_slots: int = 1
    local_threads: int = 0


@dataclass(frozen=True)
class RunnerSettings:
    """What running trials needs: the models, how many trials at once and where."""

    models: ModelSettings
    concurrency: int = 8
    workspace_dir: str | None = None
    sim: SimSettings = SimSettings()
    """Handed through to the simulated models (`TrialContext.sim_noise`, the cache's variant)."""
    record: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Every setting as given (`Settings.model_dump()`), stored with each run as its provenance;
    the runner records it and reads nothing from it."""

    def with_seed(self, seed: int) -> RunnerSettings:
        """The same settings with the models' seed set to `seed` (`optimizer noise` draws each
        side of a comparison under its own)."""
        return replace(self, models=replace(self.models, seed=seed), record={**self.record, "seed": seed})


@dataclass(frozen=True)
class ProposalSettings:
    """How a patch is proposed: the proposer, its model or command, and what it is asked for."""

    proposer: str = "llm"
    proposer_command: str | None = None
    proposer_timeout: float = 900.0
    proposer_env: tuple[str, ...] = ()
    patcher_model: str = ""
    patcher_temperature: float = 0.7
    patch_format: str = "auto"
    seed: int = 0
    retry_attempts: int = 4
    sim: SimSettings = SimSettings()
    """Passed on to `mock/patcher` (its script or skill); other models ignore it."""


@dataclass(frozen=True)
class LoopSettings:
    """What an iteration of the loop needs (`optimizer run`, a night's iterations, `optimizer
    noise`): its own knobs, and the parts it hands on to the runner, the proposer and the gate."""

    runner: RunnerSettings
    proposal: ProposalSettings
    gate_policy: Any
    """The gate's `optimizer.gate.GatePolicy` (not imported here: this module stands on nothing)."""
    suites: tuple[str, ...] = ("card_agent",)
    trials: int = 4
    """Trials per task: `trials` when set, else `loop_trials`."""
    lone_task_factor: int = 5
    state_dir: str = DEFAULT_STATE_DIR
    target_buckets: int = 1
    target_order: str = "auto"
    bucket_patience: int = 2
    candidates: int = 1
    search_rollouts: int = 0
    confirm_trials: int = 0
    """Resolved: the setting, or `batch_pairs` with a search and else 0 when it is unset."""
    max_changed_lines: int = 40
    request_token_budget: int = 12000
    night_alpha: float = 0.10
    ablation_trials: int = 16

    @property
    def models(self) -> ModelSettings:
        return self.runner.models


@dataclass(frozen=True)
class NightlySettings:
    """What a night reads itself, besides the settings it stores and hands to its iterations
    (`optimizer.settings.night`): its models and their prices (a USD budget must bind on each),
    the gate's mode (a merge needs the strict gate) and where its state lives."""

    models: ModelSettings
    proposer: str = "llm"
    model_prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    gate: str = "strict"
    state_dir: str = DEFAULT_STATE_DIR
