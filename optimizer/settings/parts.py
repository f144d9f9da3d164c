"""The settings each layer receives: typed, frozen parts of `optimizer.settings.config.Settings`.

`Settings` is the one record a user writes (`[tool.optimizer]`, `OPTIMIZER_*`, flags) and the
one that is validated and stored with a run. A layer is handed only its part of it
(`Settings.runner`, `.proposal`, `.gate_policy`, ...), so what a layer can read is its
signature, and a change to one layer's settings cannot reach another unseen. The simulator's
knobs (`SimSettings`) are a part of their own, read only by the mock models they drive. Each
part's fields have the names of the settings they come from (docs/settings.md), and no
defaults: each default is written once, on `Settings` (or on `GatePolicy` for the gate's), and
a part is built from a `Settings` (tests/optimizer/settings/test_settings_parts.py holds both).
The commands read the settings and hand on `Settings.parts` (`SettingsParts`): nothing below
the command layer imports `Settings`.

This module imports nothing of the project, so every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping

DEFAULT_STATE_DIR = ".optimizer"
"""`state_dir`'s default: the store, trial workspaces' records and nightly state, under the project."""


@dataclass(frozen=True)
class SimSettings:
    """Knobs of the simulated models alone (`mock/sim`, the weak `mock/patcher`): no production
    model reads them."""

    sim_noise: str
    """Where `mock/sim` draws a trial's outcome from (`optimizer.trials.sim`)."""
    mock_patcher_script: str | None
    """JSON file of scripted proposals answered by `mock/patcher`."""
    mock_patcher_skill: float | None
    """`mock/patcher` as a weak patcher of `mock/sim` agents (`optimizer.proposal.weak_patcher`)."""


@dataclass(frozen=True)
class ModelSettings:
    """Which models play each role, and how they are called."""

    agent_model: str
    judge_model: str
    patcher_model: str
    temperature: float | None
    seed: int
    retry_attempts: int
    retry_base_delay: float
    cache: bool


@dataclass(frozen=True)
class ProviderSettings:
    """What a model provider's `configure` hook is handed (`optimizer.Provider.configure`): the
    models of each role and how they are called, how many trials run at once, and how many
    sequences a server on this machine decodes at once. A provider reads its sizing here; the
    loop's, the gate's and the proposer's settings are not its business."""

    models: ModelSettings
    concurrency: int
    local_slots: int
    local_threads: int


@dataclass(frozen=True)
class RunnerSettings:
    """What running trials needs: the models, how many trials at once and where."""

    models: ModelSettings
    concurrency: int
    workspace_dir: str | None
    sim: SimSettings
    """Handed through to the simulated models (`TrialContext.sim_noise`, the cache's variant)."""
    skip_graders: frozenset[str] = frozenset()
    """Graders not asked when a task has another grader: the loop's LLM judges that do not vote
    (`non_voting_judges = skip`). A run's spec records them, so its trials are reused only by a
    run that skips the same."""
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

    proposer: str
    proposer_command: str | None
    proposer_timeout: float
    proposer_env: tuple[str, ...]
    patcher_model: str
    patcher_temperature: float
    patch_format: str
    seed: int
    retry_attempts: int
    sim: SimSettings
    """Passed on to `mock/patcher` (its script or skill); other models ignore it."""


GateMode = Literal["strict", "lenient"]


@dataclass(frozen=True)
class GatePolicy:
    """The gate's part: its levels and the comparison's pair budget (settings of the same names;
    `mode` is the setting `gate`). Unlike the other parts it keeps its defaults, which `Settings`
    reads (each written once): the gate is called on its own, by benchmarks and tests, with
    the shipped policy or one field changed."""

    mode: GateMode = "strict"
    alpha: float = 0.05
    alpha_harm: float = 0.10
    max_bucket_drop: float = 0.10
    batch_pairs: int = 8
    max_target_pairs: int = 64
    min_bucket_pairs: int = 8
    max_bucket_pairs: int = 48
    max_rollouts: int = 250
    extra_target_rollouts: int = 50
    clear_after: int = 16
    """Pairs a harm group needs before its bets falling to `CLEARED_BELOW` clear it: two unlucky
    first pairs no longer end the checks of a bucket that a patch broke."""
    refuse_unsafe: str = "never"
    """Reject when a group is *not shown safe* at the end (the budget spent with it open):
    `never`, `pooled` (only the pooled group of all non-target tasks) or `any` group."""
    refuse_beyond_margin: bool = True
    """Reject when a group's 95% interval of change lies wholly below `-max_bucket_drop` at the
    decision, whatever its e-value says (`harm.beyond_margin`; the group's verdict is then *beyond
    margin*): a drop shown beyond the margin by the fixed-sample test of inferiority, checked once,
    at the end."""
    margin_min_pairs: int = 8
    """Pairs a group needs before its interval is read for `refuse_beyond_margin`: a t-interval
    over two or three changes, or over changes that happen to be equal, is too short to refuse on."""
    name_weighting: bool = False
    """Weight the harm tests toward the buckets a patch names (`harm_thresholds`). Off: a harm
    worded to name another bucket moved half of `alpha_harm` and the pairs to an innocent one
    (docs/gate.md); kept for `benchmarks/gate_power.py --arms weighted`."""

    propose_open: str = "leaning"
    """Which harm groups still open at an accept make it a *proposal* (kept for a reviewer,
    never merged by an unattended job) instead of a *merge*: `leaning`, an open group whose mean
    score or pass rate fell by more than `max_bucket_drop` with its own harm test below
    `alpha_harm` before the Bonferroni (or that has no pair scored on both sides), or `any` open
    group (`rules.verdict_of`)."""

    holdout_rule: str = "no_fall"
    """How the holdout split confirms an accept: `harm`, judged as every harm group; `no_fall`,
    besides, an accept whose holdout fell (mean score or pass rate) by more than `max_bucket_drop`
    is a *proposal* whatever its harm test says (`rules.leans`), and the safety stage may spend its
    pairs there first."""

    safety_rollouts: int = 100
    """Trials an accepted candidate may run past its budget on the harm groups that would make its
    verdict *propose* (`rules.leans`), before the verdict is given: a group that fell by chance
    drifts back within the margin and the candidate is merged; a harmed one is shown harmed and
    rejected. Only a candidate whose targets improved and that leans pays it. 0: off."""

    def budget(self, targets: int) -> int:
        """Trials a proposal with this many targeted buckets may run: `max_rollouts`, plus
        `extra_target_rollouts` for each target after the first (each needs improvement pairs of
        its own; without them the harm checks would get only what the targets left)."""
        return self.max_rollouts + self.extra_target_rollouts * max(0, targets - 1)


@dataclass(frozen=True)
class LoopSettings:
    """What an iteration of the loop needs (`optimizer run`, a night's iterations, `optimizer
    noise`): its own knobs, and the parts it hands on to the runner, the proposer and the gate."""

    runner: RunnerSettings
    proposal: ProposalSettings
    gate_policy: GatePolicy
    suites: tuple[str, ...]
    trials: int
    """Trials per task: `trials` when set, else `loop_trials`."""
    lone_task_factor: int
    state_dir: str
    target_buckets: int
    target_order: str
    bucket_patience: int
    candidates: int
    search_rollouts: int
    confirm_trials: int
    """Resolved: the setting, or `batch_pairs` with a search and else 0 when it is unset."""
    max_changed_lines: int
    request_token_budget: int
    night_alpha: float
    ablation_trials: int
    non_voting_judges: str
    """`skip`: the loop's trials do not ask the judges that do not vote (`skip_graders`); `run`: they do."""

    @property
    def models(self) -> ModelSettings:
        return self.runner.models


@dataclass(frozen=True)
class NightlySettings:
    """What a night reads itself, besides the settings it stores and hands to its iterations
    (`optimizer.settings.night`): its models and their prices (a USD budget must bind on each),
    the gate's mode (a merge needs the strict gate), its watch of merged patches and where its
    state lives."""

    models: ModelSettings
    proposer: str
    model_prices: Mapping[str, tuple[float, float]]
    gate: str
    watch_rounds: int
    watch_nights: int
    state_dir: str


@dataclass(frozen=True)
class EvalSettings:
    """What `optimizer eval` (and `optimizer suites validate`) needs: the runner's part, the
    suites run when none is named, and the trials per task when set."""

    runner: RunnerSettings
    suites: tuple[str, ...]
    trials: int | None

    @property
    def models(self) -> ModelSettings:
        return self.runner.models


@dataclass(frozen=True)
class SettingsParts:
    """The settings as the commands hand them on (`Settings.parts`): the loop's and the night's
    parts, where the state lives, and every setting's value (`values`), which a night stores
    with itself and restores on `--resume` (`optimizer.settings.night.parts_of`)."""

    loop: LoopSettings
    nightly: NightlySettings
    state_dir: str
    values: Mapping[str, Any] = field(compare=False, repr=False)
