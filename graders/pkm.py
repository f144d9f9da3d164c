"""PKM Agent graders: they read the knowledge base after the trial (the Outcome), never the chat.

Paths are relative to PKM/. A score of None means "not applicable" (e.g. routing on a trial
that correctly skipped) and is left out of the pass decision and the means.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.pkm.reminders import MARKER
from agents.pkm.state import segments
from agents.pkm.tools import PARA_ROOTS
from optimizer import GraderResult, Task, Trial, grader

READS = ("read",)
WRITES = ("write", "edit")


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CompletionConfig(_Config):
    expect: Literal["any", "persist", "skip"] = "any"


class RoutingConfig(_Config):
    expected_buckets: list[str] = Field(min_length=1)
    """Path prefixes (matched on whole path segments; a trailing / is optional)."""
    expected_files: list[str] = Field(default_factory=list)
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)


class ReadBeforeWriteConfig(_Config):
    required_read_path: str | None = None


class NoOverwriteConfig(_Config):
    seed_marker: str | None = None
    """A fixture marker id (`fact_pkm_running_002`) or the whole comment; default: every marker."""


def _state(trial: Trial) -> dict:
    return trial.outcome.environment_state


def _result(name: str, score: float | None, passed: bool, rationale: str, **details) -> GraderResult:
    return GraderResult(grader=name, score=score, passed=passed, rationale=rationale, details=details)


def skip_path(state: dict) -> bool:
    """The trial skipped and changed nothing (the graders that judge filing do not apply)."""
    return bool(state.get("skipped")) and not state.get("mutated")


def _under(path: str, prefix: str) -> bool:
    head = segments(prefix)
    return segments(path)[:len(head)] == head


@grader("pkm_completion", config=CompletionConfig, version="1", agent="pkm_agent")
def pkm_completion(task: Task, trial: Trial, config: CompletionConfig) -> GraderResult:
    state = _state(trial)
    filed = [path for path in state.get("filed_in") or [] if segments(path)[:1] and segments(path)[0] in PARA_ROOTS]
    insight = bool((state.get("insight") or {}).get("text"))
    skipped = skip_path(state)
    if config.expect == "skip" or (config.expect == "any" and state.get("skipped")):
        if skipped:
            return _result("pkm_completion", 1.0, True, "skipped with no change to the knowledge base",
                           path="skip", evidence=state.get("skip_evidence"))
        why = "skipped after changing files" if state.get("skipped") else \
            "the input should have been skipped, but it was " + ("filed" if filed else "not skipped")
        return _result("pkm_completion", 0.0, False, why, path="skip")
    checks = {"filed in a PARA file with its fact_id marker": bool(filed), "insight updated": insight,
              "did not skip": not state.get("skipped")}
    score = sum(checks.values()) / len(checks)
    failed = [name for name, ok in checks.items() if not ok]
    return _result("pkm_completion", score, score == 1.0,
                   f"filed in {', '.join(filed)} and insight updated" if not failed else
                   f"{len(failed)} of 3 checks not met: " + ", ".join(f"'{name}'" for name in failed),
                   path="persist", checks=checks, filed_in=filed)


@grader("pkm_routed_correctly", config=RoutingConfig, version="1", agent="pkm_agent")
def pkm_routed_correctly(task: Task, trial: Trial, config: RoutingConfig) -> GraderResult:
    state = _state(trial)
    if skip_path(state):
        return _result("pkm_routed_correctly", None, True, "not applicable: the trial skipped")
    changed = list(state.get("created") or []) + list(state.get("modified") or [])
    destinations = list(state.get("filed_in") or []) or changed
    if not destinations:
        return _result("pkm_routed_correctly", 0.0, False, "nothing was filed")
    files = {"/".join(segments(path)) for path in config.expected_files}
    scores = {}
    for path in destinations:
        if "/".join(segments(path)) in files:
            scores[path] = 1.0
        elif any(_under(path, bucket) for bucket in config.expected_buckets):
            scores[path] = 0.5 if files else 1.0
        else:
            scores[path] = 0.0
    score = sum(scores.values()) / len(scores)
    wanted = ", ".join(config.expected_files or config.expected_buckets)
    rationale = "; ".join(f"{path}: {value:g}" for path, value in scores.items()) + f" (expected {wanted})"
    return _result("pkm_routed_correctly", score, score >= config.min_score, rationale, per_file=scores)


@grader("pkm_read_before_write", config=ReadBeforeWriteConfig, version="1", agent="pkm_agent")
def pkm_read_before_write(task: Task, trial: Trial, config: ReadBeforeWriteConfig) -> GraderResult:
    state = _state(trial)
    events = state.get("events") or []
    existing = {path for path, sides in (state.get("files") or {}).items() if sides.get("before") is not None}
    existing |= set(state.get("deleted") or [])
    first_read: dict[str, int] = {}
    first_write: dict[str, int] = {}
    for number, event in enumerate(events):
        origin = event.get("origin") or event.get("path")
        if event["op"] in READS:
            first_read.setdefault(origin, number)
        elif event["op"] in WRITES and (event["op"] == "edit" or event.get("existed")):
            first_write.setdefault(origin, number)
    if config.required_read_path:
        target = "/".join(segments(config.required_read_path))
        read_at = first_read.get(target)
        mutations = [n for n, e in enumerate(events) if e["op"] in ("write", "edit", "move", "remove")]
        write_at = first_write.get(target, mutations[0] if mutations else None)
        if read_at is None:
            return _result("pkm_read_before_write", 0.0, False, f"{target} was never read")
        if write_at is not None and write_at < read_at:
            return _result("pkm_read_before_write", 0.0, False, f"{target} was changed before it was read")
        return _result("pkm_read_before_write", 1.0, True, f"{target} was read before any change to it")
    edited = sorted(path for path in first_write if path in existing)
    if not edited:
        return _result("pkm_read_before_write", None, True, "not applicable: no existing file was edited")
    unread = [path for path in edited if first_read.get(path) is None or first_read[path] > first_write[path]]
    score = 1 - len(unread) / len(edited)
    return _result("pkm_read_before_write", score, not unread,
                   "every edited file was read first" if not unread else "edited before reading: " + ", ".join(unread),
                   edited=edited, unread=unread)


@grader("pkm_no_overwrite", config=NoOverwriteConfig, version="1", agent="pkm_agent")
def pkm_no_overwrite(task: Task, trial: Trial, config: NoOverwriteConfig) -> GraderResult:
    state = _state(trial)
    if config.seed_marker:
        found = MARKER.findall(config.seed_marker)
        markers = found or [config.seed_marker.strip()]
    else:
        markers = list(state.get("markers_before") or [])
    if not markers:
        return _result("pkm_no_overwrite", None, True, "not applicable: the fixture has no markers")
    present = state.get("markers_after") or {}
    lost = [marker for marker in markers if marker not in present]
    score = 1 - len(lost) / len(markers)
    rationale = f"all {len(markers)} seed marker(s) still present" if not lost else \
        f"{len(lost)} of {len(markers)} seed marker(s) deleted: " + ", ".join(lost[:10])
    return _result("pkm_no_overwrite", score, not lost, rationale, lost=lost)


@grader("pkm_fact_id_preserved", version="1", agent="pkm_agent")
def pkm_fact_id_preserved(task: Task, trial: Trial, config: BaseModel) -> GraderResult:
    state = _state(trial)
    if skip_path(state):
        return _result("pkm_fact_id_preserved", None, True, "not applicable: the trial skipped")
    filed = state.get("filed_in") or []
    if filed:
        return _result("pkm_fact_id_preserved", 1.0, True, f"{state.get('marker')} is in {', '.join(filed)}")
    changed = list(state.get("created") or []) + list(state.get("modified") or [])
    why = f"no written file carries {state.get('marker')}" + (f" (changed: {', '.join(changed)})" if changed else "")
    return _result("pkm_fact_id_preserved", 0.0, False, why)
