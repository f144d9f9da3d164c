"""PKM Agent graders: they read the knowledge base after the trial (the Outcome), never the chat.

Paths are relative to PKM/. A score of None means "not applicable" (e.g. routing on a trial
that correctly skipped) and is left out of the pass decision and the means.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from optimizer import AnswerKey, GraderConfig, GraderResult, Task, Trial, grader
from optimizer.errors import TaskFileError
from prompt_optimizer_outcomes.pkm import MARKER, PARA_ROOTS, PKMOutcome, segments

READS = ("read",)
WRITES = ("write", "edit")
EXPECTED_PATH = AnswerKey("expected file path")


class CompletionConfig(GraderConfig):
    expect: Literal["any", "persist", "skip"] = "any"
    """When left out: what the task's `reference_solution.expected_outcome` says (`expected_path`),
    and "any" only when it says nothing."""


class RoutingConfig(GraderConfig):
    expected_buckets: list[str] = Field(min_length=1)
    """Path prefixes (matched on whole path segments; a trailing / is optional)."""
    expected_files: Annotated[list[str], EXPECTED_PATH] = Field(default_factory=list)
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)


class ReadBeforeWriteConfig(GraderConfig):
    required_read_path: Annotated[str | None, EXPECTED_PATH] = None


class NoOverwriteConfig(GraderConfig):
    seed_marker: str | None = None
    """A fixture marker id (`fact_pkm_running_002`) or the whole comment; default: every marker."""


def _expected_outcome(task: Task) -> dict:
    return task.reference_solution.expected_outcome if task.reference_solution else {}


SKIP_KEYS = {"skipped": True, "skipped_pkm": True, "wrote_para": False}
"""The keys of `expected_outcome` that say whether the note is skipped, and the value of each
that means "skip". The public format writes `skipped_pkm` (beside `is_complete: true`, which says
the agent finished its turn, not that it filed); our suites write `skipped` or `wrote_para`."""


def expected_path(task: Task) -> str | None:
    """Whether the public format's `reference_solution.expected_outcome` says the note is to be
    filed ("persist") or skipped ("skip"): what its skip keys say (`SKIP_KEYS`; they must agree),
    else `is_complete: true` or any `files`/`buckets` (a note with a place to go) mean filed.
    None when it says nothing."""
    outcome = _expected_outcome(task)
    said = {key: ("skip" if outcome[key] == skip else "persist")
            for key, skip in SKIP_KEYS.items() if isinstance(outcome.get(key), bool)}
    if len(set(said.values())) > 1:
        keys = ", ".join(f"{key}: {str(outcome[key]).lower()}" for key in said)
        raise TaskFileError(f"expected_outcome says both skip and file ({keys})", path=task.path,
                            field="reference_solution.expected_outcome",
                            fix="a note is either skipped or written to PARA: make these keys agree")
    if said:
        return next(iter(said.values()))
    if outcome.get("is_complete") is True or outcome.get("files") or outcome.get("buckets"):
        return "persist"
    return None


def _completion_from_task(task: Task) -> dict:
    path = expected_path(task)
    return {"expect": path} if path else {}


def _routing_from_task(task: Task) -> dict:
    """`files` become the expected files and `buckets` the expected buckets; with files alone,
    the files' folders are the buckets (the right folder earns half credit, the file full)."""
    outcome = _expected_outcome(task)
    files = [path for path in outcome.get("files") or [] if isinstance(path, str)]
    buckets = [path for path in outcome.get("buckets") or [] if isinstance(path, str)]
    if not buckets:
        buckets = list(dict.fromkeys("/".join(segments(path)[:-1]) for path in files if segments(path)[:-1]))
    return {key: value for key, value in (("expected_files", files), ("expected_buckets", buckets)) if value}


def _state(trial: Trial) -> PKMOutcome:
    return trial.outcome.read(PKMOutcome)


def result(score: float | None, passed: bool, rationale: str, **details) -> GraderResult:
    return GraderResult(score=score, passed=passed, rationale=rationale, details=details)


def _under(path: str, prefix: str) -> bool:
    head = segments(prefix)
    return segments(path)[:len(head)] == head


@grader(config=CompletionConfig, version="2", agent="pkm_agent", from_task=_completion_from_task)
def pkm_completion(task: Task, trial: Trial, config: CompletionConfig) -> GraderResult:
    state = _state(trial)
    filed = [path for path in state.filed_in if segments(path)[:1] and segments(path)[0] in PARA_ROOTS]
    insight = bool(state.insight and state.insight.text)
    skipped = state.skip_path()
    if config.expect == "skip" or (config.expect == "any" and state.skipped):
        if skipped:
            return result(1.0, True, "skipped with no change to the knowledge base",
                          path="skip", evidence=state.skip_evidence)
        why = "skipped after changing files" if state.skipped else \
            "the input should have been skipped, but it was " + ("filed" if filed else "not skipped")
        did = "skipped after changing files" if state.skipped else "filed" if filed else "not skipped"
        return result(0.0, False, why, path="skip", confusion={"got": did, "expected": "skip"})
    checks = {"filed in a PARA file with its fact_id marker": bool(filed), "insight updated": insight,
              "did not skip": not state.skipped}
    score = sum(checks.values()) / len(checks)
    failed = [name for name, ok in checks.items() if not ok]
    extra = {"confusion": {"got": "skip", "expected": "filed"}} if state.skipped else {}
    return result(score, score == 1.0,
                  f"filed in {', '.join(filed)} and insight updated" if not failed else
                  f"{len(failed)} of 3 checks not met: " + ", ".join(f"'{name}'" for name in failed),
                  path="persist", checks=checks, filed_in=filed, **extra)


TO_FILE = ("right place", "filed elsewhere", "skipped", "not filed")
"""`filing`'s outcomes for a note that must be filed."""


def filing(trial: Trial) -> str:
    """How a graded PKM trial ended against its task, from the completion and routing graders'
    verdicts. A note to file: `right place` (filed, and the routing grader passed), `filed
    elsewhere`, `skipped` or `not filed` (`TO_FILE`); a note to skip: `rightly skipped` (graded
    as a skip: nothing changed) or `not skipped`; empty when the completion grader did not grade it."""
    results = {one.grader: one for one in trial.grader_results}
    completion = results.get("pkm_completion")
    path = completion.details.get("path") if completion is not None else None
    if path == "skip":
        return "rightly skipped" if completion.passed else "not skipped"
    if path != "persist":
        return ""
    if completion.details.get("confusion", {}).get("got") == "skip":
        return "skipped"
    if not completion.details.get("filed_in"):
        return "not filed"
    routing = results.get("pkm_routed_correctly")
    return "right place" if routing is not None and routing.applicable and routing.passed else "filed elsewhere"


def place_score(path: str, config: RoutingConfig) -> float:
    """One destination's routing score: 1 for an expected file, for a file under an expected
    bucket 0.5 when files are expected (the right folder, not the file) and 1 when only buckets
    are, else 0."""
    if "/".join(segments(path)) in {"/".join(segments(file)) for file in config.expected_files}:
        return 1.0
    if any(_under(path, bucket) for bucket in config.expected_buckets):
        return 0.5 if config.expected_files else 1.0
    return 0.0


@grader(config=RoutingConfig, version="2", agent="pkm_agent", from_task=_routing_from_task)
def pkm_routed_correctly(task: Task, trial: Trial, config: RoutingConfig) -> GraderResult:
    state = _state(trial)
    if state.skip_path():
        return result(None, True, "not applicable: the trial skipped")
    changed = state.created + state.modified
    destinations = list(state.filed_in) or changed
    if not destinations:
        return result(0.0, False, "nothing was filed")
    scores = {path: place_score(path, config) for path in destinations}
    score = sum(scores.values()) / len(scores)
    wanted = ", ".join(config.expected_files or config.expected_buckets)
    rationale = "; ".join(f"{path}: {value:g}" for path, value in scores.items()) + f" (expected {wanted})"
    wrong = [path for path, value in scores.items() if value == 0.0]
    extra = {"confusion": {"got": "/".join(segments(wrong[0])[:-1]) or wrong[0],
                           "expected": " or ".join(config.expected_buckets[:3])}} if wrong else {}
    return result(score, score >= config.min_score, rationale, per_file=scores, **extra)


@grader(config=ReadBeforeWriteConfig, version="1", agent="pkm_agent")
def pkm_read_before_write(task: Task, trial: Trial, config: ReadBeforeWriteConfig) -> GraderResult:
    state = _state(trial)
    events = state.events
    existing = {path for path, sides in state.files.items() if sides.before is not None}
    existing |= set(state.deleted)
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
            return result(0.0, False, f"{target} was never read")
        if write_at is not None and write_at < read_at:
            return result(0.0, False, f"{target} was changed before it was read")
        return result(1.0, True, f"{target} was read before any change to it")
    edited = sorted(path for path in first_write if path in existing)
    if not edited:
        return result(None, True, "not applicable: no existing file was edited")
    unread = [path for path in edited if first_read.get(path) is None or first_read[path] > first_write[path]]
    score = 1 - len(unread) / len(edited)
    return result(score, not unread,
                  "every edited file was read first" if not unread else "edited before reading: " + ", ".join(unread),
                  edited=edited, unread=unread)


@grader(config=NoOverwriteConfig, version="1", agent="pkm_agent")
def pkm_no_overwrite(task: Task, trial: Trial, config: NoOverwriteConfig) -> GraderResult:
    state = _state(trial)
    if config.seed_marker:
        found = MARKER.findall(config.seed_marker)
        markers = found or [config.seed_marker.strip()]
    else:
        markers = list(state.markers_before)
    if not markers:
        return result(None, True, "not applicable: the fixture has no markers")
    present = state.markers_after
    lost = [marker for marker in markers if marker not in present]
    score = 1 - len(lost) / len(markers)
    rationale = f"all {len(markers)} seed marker(s) still present" if not lost else \
        f"{len(lost)} of {len(markers)} seed marker(s) deleted: " + ", ".join(lost[:10])
    return result(score, not lost, rationale, lost=lost)


@grader(version="1", agent="pkm_agent")
def pkm_fact_id_preserved(task: Task, trial: Trial, config: BaseModel) -> GraderResult:
    state = _state(trial)
    if state.skip_path():
        return result(None, True, "not applicable: the trial skipped")
    filed = state.filed_in
    if filed:
        return result(1.0, True, f"{state.marker} is in {', '.join(filed)}")
    changed = state.created + state.modified
    why = f"no written file carries {state.marker}" + (f" (changed: {', '.join(changed)})" if changed else "")
    return result(0.0, False, why)
