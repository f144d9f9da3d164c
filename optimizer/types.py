"""The data model: task files (input, strict) and run records (output).

Task files follow the public task format of the Memex app's evals, so real task files load
unchanged. Input models are strict: an unknown key or a value of the wrong type is an error that
names the file and the field.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

FACT_ID_PATTERN = re.compile(r"^(\d{4})/(\d{2})/(\d{2})\.md#ts_(\d+)$")
DEFAULT_FACT_ID = "2026/01/01.md#ts_1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TaskInput(_Strict):
    """The raw user input a trial starts from."""

    content: str = ""
    """The raw note; may be empty (the agent must still behave sensibly)."""
    fact_id: str | None = None
    """`YYYY/MM/DD.md#ts_N`; generated from `published_at` (or a fixed date) when absent."""
    published_at: datetime | None = None
    """Publish time shown to the agent; derived from the fact_id date (09:00 UTC) when absent."""
    fixture_dir: str | None = None
    """Folder, relative to the suite root, copied into the trial workspace."""
    base_fixture: str | None = None
    """Fixture copied first: a folder name, looked up in the suite root, then in the project's `fixtures/`."""
    assets: list[str] = Field(default_factory=list)
    """Descriptions of attached assets (photos, audio), appended to the user message."""
    location: str | None = None
    """Where the note was written, appended to the user message."""

    @field_validator("fact_id")
    @classmethod
    def _check_fact_id(cls, value: str | None) -> str | None:
        if value is None:
            return value
        match = FACT_ID_PATTERN.match(value)
        if not match:
            raise ValueError("must look like 'YYYY/MM/DD.md#ts_N', e.g. '2026/05/25.md#ts_1'")
        year, month, day, _ = match.groups()
        try:
            datetime(int(year), int(month), int(day))
        except ValueError as exc:
            raise ValueError(f"{year}/{month}/{day} is not a date ({exc})") from None
        return value

    def resolved_fact_id(self) -> str:
        if self.fact_id:
            return self.fact_id
        if self.published_at:
            return self.published_at.strftime("%Y/%m/%d.md#ts_1")
        return DEFAULT_FACT_ID

    def resolved_published_at(self) -> datetime:
        if self.published_at:
            return self.published_at
        year, month, day, _ = FACT_ID_PATTERN.match(self.resolved_fact_id()).groups()
        return datetime(int(year), int(month), int(day), 9, 0, tzinfo=timezone.utc)


class ToolCallSpec(_Strict):
    """One call an ideal agent makes; replayed by `mock/oracle`."""

    name: str
    """A tool the agent offers (`@agent(tools=...)`); checked when the suite loads."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """The call's arguments, as the model would send them."""


class ReferenceSolution(_Strict):
    """What an ideal agent does with the task: `mock/oracle` replays it, `suites validate` checks it."""

    source: Literal["manual", "captured", "synthesized"] = "manual"
    """How the solution was made: by hand, captured from a run, or synthesized. Recorded only."""
    expected_outcome: dict[str, Any] = Field(default_factory=dict)
    """Facts of the right outcome that a grader may read for keys its config leaves out."""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    """The calls, one per turn; without them the oracle has nothing to replay."""


class GraderSpec(_Strict):
    name: str
    """A registered grader (`@grader`)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The grader's config, validated against its `GraderConfig` when the suite loads."""


class Task(_Strict):
    """One task file."""

    id: str = Field(min_length=1)
    """Unique in its suite; names the task in reports and in the store."""
    description: str = ""
    """What the task checks, shown beside its failures in the coding agent's request."""
    trials_per_run: int | None = Field(default=None, ge=1, le=1000)
    """Trials of this task per run; falls back to the suite's default, then 1."""
    timeout_seconds: int = Field(default=300, ge=1)
    """Wall-clock limit of one trial; past it the trial is cut short and fails with score 0."""
    metadata: dict[str, str] = Field(default_factory=dict)
    """Free-form tags. `failure_bucket` names the bucket; `split` is `train` or `holdout`."""
    input: TaskInput = Field(default_factory=TaskInput)
    """What the trial starts from."""
    reference_solution: ReferenceSolution | None = None
    """What an ideal agent does; optional."""
    graders: list[GraderSpec] = Field(min_length=1)
    """A trial's score is the mean of the applicable graders' scores; it passes when each of them passes."""

    _path: Path | None = PrivateAttr(default=None)
    _suite_root: Path | None = PrivateAttr(default=None)

    @field_validator("metadata")
    @classmethod
    def _check_split(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get("split", "train") not in ("train", "holdout", "test"):
            raise ValueError("metadata.split must be 'train', 'holdout' or 'test' (the sealed split "
                             "that only benchmarks/transfer.py reads)")
        return value

    @property
    def bucket(self) -> str:
        return self.metadata.get("failure_bucket", "unbucketed")

    @property
    def split(self) -> str:
        return self.metadata.get("split", "train")

    @property
    def path(self) -> Path | None:
        return self._path

    def reference_calls(self) -> list[ToolCallSpec]:
        """The reference solution's tool calls (none when the task has no reference solution)."""
        return list(self.reference_solution.tool_calls) if self.reference_solution else []

    @property
    def suite_root(self) -> Path | None:
        return self._suite_root


class SuiteSpec(_Strict):
    """`suite.json`."""

    name: str = Field(min_length=1)
    agent_name: str
    kind: Literal["capability", "regression"] = "capability"
    task_pass_threshold: float = Field(default=1.0, ge=0.0, le=1.0)
    """Share of a task's scored trials that must pass for the task to count as passed in a
    regression check; pass@k and pass^k are reported regardless."""
    trials_per_run: int | None = Field(default=None, ge=1, le=1000)
    description: str = ""


class Suite(BaseModel):
    """A loaded, validated suite: its spec, root folder and tasks in path order."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    spec: SuiteSpec
    root: Path
    tasks: list[Task]

    @property
    def name(self) -> str:
        return self.spec.name

    def trials_for(self, task: Task) -> int:
        return task.trials_per_run or self.spec.trials_per_run or 1


# ---------------------------------------------------------------- run records


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    """Model calls actually made (cache hits excluded)."""
    cache_hits: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: "Usage") -> None:
        for name in ("prompt_tokens", "completion_tokens", "cached_prompt_tokens", "cost_usd",
                     "calls", "cache_hits"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class ToolCall(BaseModel):
    """A tool call the model made and what the tool answered."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str = ""
    is_error: bool = False


class Transcript(BaseModel):
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""


class OutcomeModel(BaseModel):
    """Base of an agent's typed outcome: the final state of a trial's workspace, as the agent's
    own code describes it and its graders read it. Declare one per agent (`@agent(...,
    outcome=...)`), build it at the end of the run, and have the graders read it with
    `trial.outcome.read(...)`; the two sides share this model and nothing else. It is stored as
    its JSON (`model_dump(mode="json")`), so give every field a default that means "absent": a
    trial cut short, or one stored before a field was added, still reads."""

    model_config = ConfigDict(extra="forbid")


S = TypeVar("S", bound=BaseModel)


class Outcome(BaseModel):
    """The final state of the trial's workspace, as stored: the agent's typed outcome as JSON data.

    Built from the typed outcome (`Outcome(environment_state=CardOutcome(...))`: validated when
    built, then dumped) or, by an agent that declares none, from a JSON-serialisable dict."""

    environment_state: dict[str, Any] = Field(default_factory=dict)

    @field_validator("environment_state", mode="before")
    @classmethod
    def _dump_typed(cls, value: Any) -> Any:
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value

    def read(self, model: type[S]) -> S:
        """The state as `model`, the outcome type of the agent the grader reads (validated on each
        call: a grader may not change what the next one reads)."""
        return model.model_validate(self.environment_state)


class GraderResult(BaseModel):
    grader: str = ""
    """The grader's registered name; the registry fills it in (a grader need not repeat it)."""
    score: float | None = None
    """In [0, 1], or None when the grader does not apply to this trial."""
    passed: bool = False
    rationale: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    errored: bool = False
    """The grader could not produce a verdict (e.g. a judge returned garbage)."""

    @property
    def applicable(self) -> bool:
        return self.score is not None and not self.errored


TrialStatus = Literal["passed", "failed", "errored"]


class Trial(BaseModel):
    """One execution of one task."""

    suite: str
    task_id: str
    bucket: str
    split: str
    index: int
    status: TrialStatus
    score: float | None = None
    transcript: Transcript = Field(default_factory=Transcript)
    outcome: Outcome = Field(default_factory=Outcome)
    grader_results: list[GraderResult] = Field(default_factory=list)
    error: str | None = None
    duration_s: float = 0.0


class RunResult(BaseModel):
    """Everything one evaluation run produced."""

    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    fingerprints: dict[str, Any] = Field(default_factory=dict)
    """Hashes of prompts and tasks, model ids, commit: what a rerun must match to reuse this."""
    trials: list[Trial] = Field(default_factory=list)

    @property
    def usage(self) -> Usage:
        total = Usage()
        for trial in self.trials:
            total.add(trial.transcript.usage)
        return total
