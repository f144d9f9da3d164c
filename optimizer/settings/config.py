"""Settings: the one record a user writes, every field with its type, range and default, and the
parts it is cut into for each layer. Where its values come from is `optimizer.settings.sources`;
reading and checking them, `optimizer.settings.loading`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from optimizer.settings.parts import (EvalSettings, GatePolicy, LoopSettings, ModelSettings, NightlySettings,
                                      ProposalSettings, ProviderSettings, RunnerSettings, SettingsParts, SimSettings)
from optimizer.settings.sources import DEFAULT_STATE_DIR

DEFAULT_MODEL = "local/qwen2.5-coder-1.5b"
"""The embedded model (`optimizer model install`): every role works with no key and no network."""
DEFAULT_MODELS_FILE = "models.yaml"
MAX_TRIALS = 1000
"""Trials per task (`trials`, `loop_trials`): pass^k and the gate's pairs need tens; a thousand
per task is a study, and the largest plan (times `lone_task_factor`) still fits in memory."""
MAX_PAIRS = 10_000
"""Pairs of one bucket (`min_bucket_pairs`, `max_bucket_pairs`, `max_target_pairs`): the gate
decides on tens; the bound keeps its plans small (each pair is a planned trial of each prompt)."""
MAX_ROLLOUTS = 100_000
"""Trials of one proposal's gate or one search (`max_rollouts`, `extra_target_rollouts`,
`search_rollouts`): 400 times the default gate."""
MAX_PRICE = 10_000.0
"""USD per million tokens: the dearest hosted models cost well under a thousand."""
Price = Annotated[float, Field(ge=0.0, le=MAX_PRICE, allow_inf_nan=False)]
"""One price of `model_prices`: non-negative and finite (a negative one would make spending look
like income, and a budget never stop)."""
GATE = GatePolicy()
"""The shipped gate policy, whose defaults are the gate settings' (each written once, there)."""


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_model: str = DEFAULT_MODEL
    """Model that runs the agents."""
    judge_model: str = DEFAULT_MODEL
    """Model behind the LLM graders."""
    patcher_model: str = DEFAULT_MODEL
    """Model that proposes prompt patches."""
    patcher_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    """Sampling temperature of the llm proposer when an iteration asks for several proposals (a
    search's candidates, `candidates` > 1), each drawn with a seed of its own so they differ and
    a rerun reproduces them; a single proposal is greedy (temperature 0)."""
    suites: list[str] = Field(default_factory=lambda: ["card_agent"], min_length=1)
    """Suites evaluated when no --suite is given (names under suites/ or paths)."""
    concurrency: int = Field(default=8, ge=1, le=256)
    """Trials run at once."""
    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    """Trials per task, overriding the task and suite defaults."""
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    """Seed passed to models that accept one (and to mock/sim)."""
    sim_noise: Literal["paired", "independent"] = "paired"
    """Where `mock/sim` draws a trial's outcome from (see `optimizer.trials.sim`). `paired`: seed, task
    and trial index only, so a baseline and a candidate prompt share their randomness (an
    easier comparison than any real model gives). `independent`: the system prompt's hash too,
    so a changed prompt gets independent outcomes at its own rate, as a model sampled at
    temperature > 0 would; the same prompt still reproduces."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Sampling temperature of the agent model; the provider default when unset."""
    state_dir: str = DEFAULT_STATE_DIR
    """Where the store, the response cache and run artifacts live (relative to the project root)."""
    database_url: str | None = None
    """SQLAlchemy URL of the store; default sqlite:///<state_dir>/optimizer.db."""
    workspace_dir: str | None = None
    """Parent folder of trial workspaces; default /dev/shm when writable (in memory), else the
    system temp folder."""
    local_slots: int = Field(default=1, ge=1, le=64)
    """Sequences the embedded model's server decodes at once, and so the trials that run at once
    on it. Each slot holds a context of its own (~340 MB of memory). On 2 cores one slot runs the
    card suite fastest; more pay on more cores (see docs/scale-out.md)."""
    local_threads: int = Field(default=0, ge=0, le=256)
    """Threads the embedded model's server generates with; 0 (the default): every core but one
    (one on a one- or two-core machine), which keeps its speed beside other busy processes. On a
    machine with nothing else running, every core generates faster (docs/models.md, Threads)."""
    retry_attempts: int = Field(default=4, ge=1, le=20)
    retry_base_delay: float = Field(default=1.0, ge=0.0, le=30.0)
    """Base of the exponential backoff, in seconds; a delay is never longer than 30 s (`RetryPolicy`)."""
    cache: bool = True
    """Serve identical requests from the response cache."""

    # ---- the loop (`optimizer run`, `optimizer noise`)
    loop_trials: int = Field(default=4, ge=1, le=MAX_TRIALS)
    """Trials per task in `optimizer run` and `optimizer noise` unless `trials` is set: the gate
    pairs trials, and one trial per task is too few pairs to show a bucket improved."""
    lone_task_factor: int = Field(default=5, ge=1, le=20)
    """In `optimizer run` and `optimizer noise`, a train task alone in its bucket runs this many
    times the trials of the others in the baseline (20 for 4): that bucket's score is one task's,
    so a drop shows only in its pairs, and the harm test needs about 40 of them to catch a large
    one. The extra trials are the comparison's reserve: paired only when a harm check asks for
    more of the task's pairs, at the cost of the candidate's trial alone (docs/gate.md)."""
    batch_pairs: int = Field(default=GATE.batch_pairs, ge=1, le=1000)
    """Fresh pairs per targeted bucket between two looks of the gate's sequential test (spread
    evenly over the bucket's train tasks); a harm group that needs more pairs gets half as many
    at a time. See docs/gate.md."""
    max_target_pairs: int = Field(default=GATE.max_target_pairs, ge=1, le=MAX_PAIRS)
    """Fresh pairs per targeted bucket after which the improvement test stops, shown or not."""
    min_bucket_pairs: int = Field(default=GATE.min_bucket_pairs, ge=0, le=MAX_PAIRS)
    """Pairs every other bucket, the holdout split and each regression suite get before the harm
    test looks (a group with fewer baseline trials gets fresh pairs for both prompts)."""
    max_bucket_pairs: int = Field(default=GATE.max_bucket_pairs, ge=1, le=MAX_PAIRS)
    """Pairs after which a harm group still open (its drop bets have not lost half their stake)
    gets no more."""
    max_rollouts: int = Field(default=GATE.max_rollouts, ge=2, le=MAX_ROLLOUTS)
    """Trials the gate may run per proposal, both prompts counted (cached base-prompt trials
    excepted). About twice a full staged rerun of the card suite."""
    extra_target_rollouts: int = Field(default=GATE.extra_target_rollouts, ge=0, le=MAX_ROLLOUTS)
    """Trials added to a proposal's `max_rollouts` for each targeted bucket after the first."""
    target_buckets: int = Field(default=1, ge=1, le=20)
    """Failure buckets targeted per iteration (each must improve)."""
    target_order: Literal["auto", "changeable", "headroom"] = "auto"
    """How target selection ranks buckets: `headroom`, the most tasks failing per round first;
    `changeable`, those failing on a confusion a grader names (template X chosen where Y was
    expected) counted twice (`optimizer.proposal.targets`). `auto`: `changeable` for the embedded
    (`local/*`) agent models, else `headroom`."""
    models_file: str = DEFAULT_MODELS_FILE
    """litellm `model_list` file (relative to the project root) whose `model_name`s are served by
    several deployments through a litellm Router: llama-server, vLLM, any OpenAI-compatible
    endpoint, hosted APIs (see docs/models.md). A missing default file routes nothing; any other
    missing file is an error."""
    model_prices: dict[str, tuple[Price, Price]] = Field(default_factory=dict)
    """USD per million input and output tokens, by model string (overrides litellm's price map;
    how a self-hosted model gets a price). Environment: JSON, e.g. '{"mock/sim": [1, 2]}'."""
    bucket_patience: int = Field(default=2, ge=1, le=100)
    """Rejected proposals for a bucket at the same base commit after which the loop targets the
    next failing bucket instead (the prompt must change before it tries that bucket again). A
    search that promoted no candidate counts as one rejected proposal for its targets."""
    proposer: Literal["llm", "command"] = "llm"
    proposer_command: str | None = None
    """Coding-agent command line for `--proposer command`; `{request}` and `{workdir}` are
    replaced by the (shell-quoted) request file and worktree paths."""
    proposer_timeout: float = Field(default=900.0, gt=0, le=86400.0)
    proposer_env: list[str] = Field(default_factory=list)
    """Names of further environment variables the `command` proposer gets, beside the ones it
    always gets (`proposers.proposer_environment`: the system's, and the providers' keys and
    bases). Never `OPTIMIZER_*` or a database's (`proposers.NEVER_PASSED`)."""
    patch_format: Literal["auto", "edits", "rule", "contrast", "decision", "example"] = "auto"
    """What the `llm` proposer asks the patcher for: exact search/replace `edits`, or one new
    `rule` appended to the prompt; `contrast` asks for one rule from a short request of
    contrastive cases (what the agent did, what was expected; `optimizer.proposal.contrast`), a form for
    small patcher models. `auto`: `example` for the embedded (`local/*`) models, else `edits`.
    `decision`: the contrast request with its cases taken from every bucket where the agent made the
    target's most frequent wrong choice (the same template or folder where another was expected), so
    the rule is scoped to the choice rather than to one bucket's notes.
    `example`: no patcher where it can: an answer the prompt shows that the targets' failures chose
    taken out (`optimizer.proposal.anchors`), or a worked example of a target with examples of
    other buckets (`optimizer.proposal.examples`); else `contrast` (embedded patcher) or `edits`."""
    candidates: int = Field(default=1, ge=1, le=20)
    """Proposals per iteration (the best accepted one is kept); with a search, how many of its
    candidates go to the gate at most (up to 2)."""
    search_rollouts: int = Field(default=0, ge=0, le=MAX_ROLLOUTS)
    """Screening budget of an iteration, in trials: when above 0 the loop runs a search on the
    `gepa` engine over the targeted buckets first (a pool of candidates from the proposer,
    screened on minibatches at trial indexes of their own) and sends only its best one or two
    to the gate, which judges them on fresh trials (see docs/search.md). 0: one proposal per
    `candidates`, straight to the gate. A budget too small to screen anything is refused."""
    confirm_trials: int | None = Field(default=None, ge=0, le=1000)
    """Fresh base-prompt trials of a target's train tasks run before anything is proposed for
    it (screening trials, never seen by the gate): when none fails, the target is skipped for the
    next failing bucket in the same iteration (the baseline's failure was noise, or the rule is
    already in). Unset: `batch_pairs` when `search_rollouts` is on, else 0 (no check)."""
    gate: Literal["strict", "lenient"] = GATE.mode
    max_bucket_drop: float = Field(default=GATE.max_bucket_drop, ge=0.0, le=1.0)
    """The drop of a bucket's mean score the harm test should detect: a group whose detectable
    drop at its pairs is larger, and that is still open at the end, is reported as not shown safe."""
    alpha: float = Field(default=GATE.alpha, gt=0.0, lt=1.0)
    """Level of the improvement test (anytime-valid; each targeted bucket at this level: an
    intersection-union test, docs/gate.md)."""
    night_alpha: float = Field(default=0.10, gt=0.0, lt=1.0)
    """Family-wise level of a nightly's accepts: its j-th gated candidate is tested at
    min(`alpha`, night_alpha / (j (j + 1))), so the chance that a night merges any patch that
    changes nothing is at most this (`optimizer.nightly.spending`)."""
    alpha_harm: float = Field(default=GATE.alpha_harm, gt=0.0, lt=1.0)
    """Family-wise level of the harm tests: the chance that noise vetoes a patch that harms
    nothing, over every bucket, the holdout split and the regression suites together."""
    refuse_unsafe: Literal["never", "pooled", "any"] = GATE.refuse_unsafe
    """Reject a candidate when a harm group is still *not shown safe* when the comparison ends:
    `never`, `pooled` (only the group of all non-target tasks together) or `any` group
    (`optimizer.gate.GatePolicy`, docs/gate.md#trade-off-budget-refusal-and-harm)."""
    clear_after: int = Field(default=GATE.clear_after, ge=0, le=100000)
    """Pairs a harm group needs before its bets falling to 1/2 clear it."""
    refuse_beyond_margin: bool = GATE.refuse_beyond_margin
    """Reject when a group's 95% interval of change lies wholly below `-max_bucket_drop`."""
    margin_min_pairs: int = Field(default=GATE.margin_min_pairs, ge=2, le=100000)
    """Pairs a group needs before its interval is read for `refuse_beyond_margin`."""
    name_weighting: bool = GATE.name_weighting
    """Weight the harm tests toward the buckets a patch's lines name (docs/gate.md)."""
    propose_open: Literal["leaning", "any"] = GATE.propose_open
    """Which harm groups still open at an accept make it a proposal for a reviewer instead of a
    merge (`nightly --merge` merges only merges): `leaning`, an open group whose mean score or
    pass rate fell by more than `max_bucket_drop` with its own harm test below `alpha_harm`, or
    `any` open group."""
    holdout_rule: Literal["harm", "no_fall"] = GATE.holdout_rule
    """How the holdout split confirms an accept: `harm`, as every harm group; `no_fall`, besides,
    an accept whose holdout fell (score or pass rate) by more than `max_bucket_drop` is a proposal,
    never merged, whatever its harm test says (docs/gate.md#the-holdout-confirms)."""
    safety_rollouts: int = Field(default=GATE.safety_rollouts, ge=0, le=100000)
    """Trials an accepted candidate may run past `max_rollouts` on the harm groups that would make
    it a proposal (the safety stage, docs/gate.md#merge-or-propose). 0: off."""
    max_changed_lines: int = Field(default=40, ge=1, le=10000)
    ablation_trials: int = Field(default=16, ge=0, le=1000)
    """Screening trials per variant when a patch changes several parts of the prompt: the whole
    patch and the patch without each part, on the targeted buckets' train tasks; a part whose
    removal does not lower the targets is dropped before the gate (`optimizer.proposal.ablation`). 0: off."""
    non_voting_judges: Literal["skip", "run"] = "skip"
    """Whether the loop's trials ask an LLM judge the gate leaves out (`skip`: not when the task has another grader)."""
    watch_rounds: int = Field(default=1, ge=0, le=100)
    """Pairs per task of every harm group of each merged patch under watch, run by every merging
    night before its iterations (`optimizer.nightly.watch`): the prompt with and without the patch. 0: no watch."""
    watch_nights: int = Field(default=10, ge=1, le=1000)  # nights a patch is watched at most
    request_token_budget: int = Field(default=12000, ge=1000, le=1000000)  # request.md's cap, characters / 4
    mock_patcher_script: str | None = None
    """JSON file of scripted proposals answered by the `mock/patcher` model (tests, demos)."""
    mock_patcher_skill: float | None = Field(default=None, ge=0.0, le=1.0)
    """Makes `mock/patcher` a weak patcher that needs no script (see `optimizer.proposal.weak_patcher`):
    for the targeted bucket of a `mock/sim` agent it proposes the rule the sim recognises with
    this probability, that rule plus a rule contradicting another bucket with probability
    (1 - skill) / 4, and else a plausible rule that changes nothing. Draws are seeded by `seed`,
    the request and the proposal, so reruns reproduce. For measuring the loop against a patcher
    that is not always right."""

    # ---- the parts handed to each layer (optimizer.settings.parts); built afresh on each read,
    # so a `model_copy(update=...)` of these settings is seen in its parts
    @property
    def sim(self) -> SimSettings:
        """The simulator's knobs, read by the mock models alone."""
        return _part(SimSettings, self)

    @property
    def models(self) -> ModelSettings:
        """Which models play each role, and how they are called."""
        return _part(ModelSettings, self)

    @property
    def provider(self) -> ProviderSettings:
        """What every model provider's `configure` hook is handed."""
        return _part(ProviderSettings, self, models=self.models)

    @property
    def runner(self) -> RunnerSettings:
        """What `optimizer.trials.runner.Runner` needs, with these settings as the run's record."""
        return _part(RunnerSettings, self, models=self.models, sim=self.sim, skip_graders=frozenset(),
                     record=_recorded(self))

    @property
    def proposal(self) -> ProposalSettings:
        """What `optimizer.proposal.make.make_proposer` needs."""
        return _part(ProposalSettings, self, sim=self.sim, proposer_env=tuple(self.proposer_env))

    @property
    def gate_policy(self) -> GatePolicy:
        """The gate's mode, levels and pair budget (`GatePolicy`; its `mode` is the setting `gate`)."""
        return _part(GatePolicy, self, mode=self.gate)

    @property
    def loop(self) -> LoopSettings:
        """What an iteration of the loop needs, with the parts it hands on; its trials per task
        (and so its runs' records) are `trials` when set, else `loop_trials`."""
        resolved = self.model_copy(update={"trials": self.trials or self.loop_trials})
        confirm = self.confirm_trials
        if confirm is None:
            confirm = self.batch_pairs if self.search_rollouts else 0
        return _part(LoopSettings, resolved, runner=resolved.runner, proposal=resolved.proposal,
                     gate_policy=resolved.gate_policy, suites=tuple(self.suites), confirm_trials=confirm)

    @property
    def nightly(self) -> NightlySettings:
        """What `optimizer.nightly.night` reads itself (it stores and restores `parts.values`)."""
        return _part(NightlySettings, self, models=self.models)

    @property
    def evaluation(self) -> EvalSettings:
        """What `optimizer eval` needs."""
        return _part(EvalSettings, self, runner=self.runner, suites=tuple(self.suites))

    @property
    def parts(self) -> SettingsParts:
        """What the commands hand on below them: the loop's and the night's parts, and every
        value (for a night to store)."""
        return SettingsParts(loop=self.loop, nightly=self.nightly, state_dir=self.state_dir,
                             values=self.model_dump(mode="json"))


def _recorded(settings: Settings) -> dict:
    """Every setting, as a run records it in the store: the store's URL without its password."""
    from optimizer.store.address import without_password

    return {**settings.model_dump(), "database_url": without_password(settings.database_url)}


def replay_settings(suites: list[str]) -> EvalSettings:
    """What `optimizer suites validate` runs with, whatever the project's settings: the oracle
    replaying reference solutions, one trial per task, one at a time, no response cache."""
    return Settings(agent_model="mock/oracle", judge_model="mock/oracle", trials=1, cache=False, concurrency=1,
                    suites=list(suites)).evaluation


def _part(kind: type, settings: Settings, **given: Any) -> Any:
    """The part `kind` (a dataclass of `optimizer.settings.parts`) of `settings`: each of its
    fields from the setting of the same name, unless `given`."""
    names = [name for name in kind.__dataclass_fields__ if name not in given]
    return kind(**{name: getattr(settings, name) for name in names}, **given)


