"""The search's pool (`optimizer.proposal.search`): every candidate's record, kept in a folder
keyed by the agent, base prompt and targets (`pool_folder`), and which of the pool go to the gate
(`promote_candidates`: see the search module's docstring and docs/search.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from optimizer.files import write_json
from optimizer.proposal.diffs import added_lines
from optimizer.proposal.diffs import size as diff_size
from optimizer.stats import welch_greater_p
from optimizer.trials.runner import PlannedTrial
from optimizer.proposal.screening import COMPONENT, Example, text_sha

PROMOTE = 2
"""Candidates sent to the gate per iteration at most (the setting `candidates`, up to this)."""
SCREEN_ALPHA = 0.10
"""A candidate is promoted only when its targeted screening scores beat the base prompt's at
this one-sided level (Welch's t-test): a sentence that changes nothing rarely clears it by luck,
and the gate's budget goes to candidates with evidence. A filter, not the decision: the gate
judges on fresh trials at its own levels."""
KEEP_TARGET_P = 0.25
"""A promoted candidate is judged by the gate on the targets where its screening scores beat the
base prompt's at this one-sided level (Welch's t-test; `gate_targets`), and checked for harm on
the others."""
UNCHANGED_IN_A_ROW = 2
"""Candidates in a row that change nothing after which the search ends (`search.SearchProposer.should_stop`)."""
OPEN = ("screened_out", "pool", "not_promoted", "promoted")
"""Statuses of a candidate the gate has not judged (`promoted`: a run killed before its verdict)."""
@dataclass
class Candidate:
    """One proposal of the search, as recorded and shown by `review` and the report."""

    number: int
    sha: str
    parent: str
    status: str
    """`pool` (gepa kept it) | `screened_out` (lost on its minibatch) | `rejected_check` |
    `no_patch` | `unchanged`; after promotion `promoted`, then the gate's verdict
    (`accepted`, `rejected_gate`, ...) or `not_promoted`."""
    reason: str = ""
    rationale: str = ""
    diff: str = ""
    text: str = ""
    parent_minibatch: list[float] = field(default_factory=list)
    minibatch: list[float] = field(default_factory=list)
    screen_score: float | None = None
    """Mean over the screening set (gepa's valset), when it entered the pool."""
    target_score: float | None = None
    """Mean over the targeted tasks of the screening set."""
    branch: str = ""
    failed_rules: list[str] = field(default_factory=list)
    """The gate's rules this candidate failed (`improvement`, `no_harm`, `errored`), once judged."""
    gate_targets: list[str] = field(default_factory=list)
    """Once promoted, the targets (`suite/bucket`) the gate tests it for improvement: those where
    its screening scores beat the base prompt's at `KEEP_TARGET_P` (`gate_targets`; empty in
    records made before there was a choice: every target)."""

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("text")
        return data


def faulty(records: list[Candidate]) -> list[Candidate]:
    """Candidates the gate judged and found harming or erroring (not merely not improving):
    whatever did it is among the lines they add."""
    return [record for record in records if set(record.failed_rules) - {"improvement"}]


def carries(text: str, record: Candidate) -> bool:
    """Whether a prompt holds every line `record` added to its base prompt."""
    return set(added_lines(record.diff)) <= {line.strip() for line in text.splitlines()}


@dataclass
class SearchOutcome:
    candidates: list[Candidate]
    promoted: list[Candidate]
    folder: Path
    rollouts: int
    base_score: float | None = None
    base_target_score: float | None = None


def pool_folder(parent: Path, agent: str, base_prompt: str, targets: Iterable[tuple[str, str]]) -> Path:
    key = text_sha(json.dumps([agent, base_prompt, sorted(map(list, targets))]))
    return parent / f"{agent}-{key}"


def load_records(folder: Path) -> list[Candidate]:
    path = folder / "candidates.json"
    if not path.is_file():
        return []
    return [Candidate(**row) for row in json.loads(path.read_text(encoding="utf-8"))]


def nothing_new(records: list[Candidate]) -> bool:
    """Whether a pool's last `UNCHANGED_IN_A_ROW` candidates changed nothing: its search ended
    with nothing new to screen, and a later one on the same pool would end at once."""
    recent = records[-UNCHANGED_IN_A_ROW:]
    return len(recent) == UNCHANGED_IN_A_ROW and all(record.status == "unchanged" for record in recent)


def save_records(folder: Path, records: list[Candidate]) -> None:
    write_json(folder / "candidates.json", [asdict(record) for record in records])


def promote_candidates(result, records: list[Candidate], val: list[Example], targets: set[tuple[str, str]],
                       items: dict[tuple[str, str], PlannedTrial], limit: int = PROMOTE,
                       base_extra: Iterable[tuple[tuple[str, str], float]] = ()) -> SearchOutcome:
    """Fill in the pool's screening scores and pick the candidates for the gate (module docstring).
    `base_extra`: more (target bucket, score) of the base prompt on the targeted tasks (its
    confirmation trials), for the promotion test and the gate's targets only.

    A candidate already promoted in an earlier run of this pool is not promoted again."""
    scores, by_bucket = _screening_scores(result, val, targets, items)
    base_sha = text_sha(result.candidates[0][COMPONENT])
    base, base_target = scores[base_sha]
    base_buckets = {bucket: list(values) for bucket, values in by_bucket[base_sha].items()}
    for bucket, value in base_extra:
        base_buckets.setdefault(bucket, []).append(value)
    base_sample = _pooled(base_buckets)
    _enter_pool(records, scores)
    pool = sorted((r for r in records if r.status == "pool"),
                  key=lambda r: (diff_size(r.diff), -(r.screen_score or 0.0), -(r.target_score or 0.0), r.number))
    promoted: list[Candidate] = []
    refused = faulty(records)
    for record in pool:
        covered = next((other for other in promoted + refused if carries(record.text, other)), None)
        reason = _not_promoted(record, _pooled(by_bucket.get(record.sha, {})), base_target, base_sample,
                               covered=covered, refused=refused, full=len(promoted) >= limit, limit=limit)
        if reason:
            record.status, record.reason = "not_promoted", reason
            continue
        record.status = "promoted"
        record.reason = f"screening {record.screen_score:.2f} (targets {record.target_score:.2f}) vs base {base:.2f}"
        record.gate_targets, dropped = gate_targets(by_bucket.get(record.sha, {}), base_buckets, targets)
        if dropped:
            record.reason += "; judged on " + ", ".join(record.gate_targets) + " only (" + "; ".join(
                f"{name} screened {cand:.2f}, base {was:.2f}" for name, cand, was in dropped) + ")"
        promoted.append(record)
    return SearchOutcome(candidates=records, promoted=promoted, folder=Path(), rollouts=0, base_score=base,
                         base_target_score=base_target)


def _screening_scores(result, val: list[Example], targets: set[tuple[str, str]],
                      items: dict[tuple[str, str], PlannedTrial]
                      ) -> tuple[dict[str, tuple[float, float]], dict[str, dict[tuple[str, str], list[float]]]]:
    """Per candidate text (by its sha): its mean screening score on every screening task and on
    the targeted ones (the latter pooled per bucket), and its targeted scores by bucket."""
    bucket_of = {i: (example.suite, items[example.key].task.bucket) for i, example in enumerate(val)}
    targeted = [i for i in range(len(val)) if bucket_of[i] in targets]
    scores: dict[str, tuple[float, float]] = {}
    by_bucket: dict[str, dict[tuple[str, str], list[float]]] = {}
    for candidate, subscores in zip(result.candidates, result.val_subscores):
        values = [subscores[i] for i in range(len(val)) if i in subscores]
        sha = text_sha(candidate[COMPONENT])
        buckets = by_bucket[sha] = {}
        for i in targeted:
            if i in subscores:
                buckets.setdefault(bucket_of[i], []).append(subscores[i])
        scores[sha] = (_mean(values), _mean(_pooled(buckets)))
    return scores, by_bucket


def _enter_pool(records: list[Candidate], scores: dict[str, tuple[float, float]]) -> None:
    """The open candidates gepa screened join the pool with their scores; one gepa screened out
    on its minibatch says so, unless it has a reason already."""
    by_sha = {record.sha: record for record in records if record.status in OPEN}
    for sha, (score, target) in scores.items():
        if sha in by_sha:
            record = by_sha[sha]
            record.screen_score, record.target_score = score, target
            record.status = "pool"
    for record in records:
        if record.status == "screened_out" and not record.reason:
            record.reason = (f"lost to its parent on gepa's minibatch ({sum(record.parent_minibatch):.2f} -> "
                             f"{sum(record.minibatch):.2f})")


def _not_promoted(record: Candidate, sample: list[float], base_target: float, base_sample: list[float], *,
                  covered: Candidate | None, refused: list[Candidate], full: bool, limit: int) -> str | None:
    """Why a pool candidate does not go to the gate, or None when it does. The rules in order:
    targets not above the base prompt, not clearly above it (Welch at `SCREEN_ALPHA`), `limit`
    reached, or it carries a candidate already promoted or refused."""
    if record.target_score is None or not record.target_score > base_target:
        return (f"targets screened at {_score(record.target_score)}, not above the base prompt's "
                f"{base_target:.2f}")
    if (p := welch_greater_p(sample, base_sample)) >= SCREEN_ALPHA:
        return (f"targets screened at {record.target_score:.2f} against the base prompt's "
                f"{base_target:.2f}: not clearly above (p={p:.2f} >= {SCREEN_ALPHA})")
    if full:
        return f"screening {record.screen_score:.2f}: only the best {limit} go to the gate"
    if covered is not None:
        return (f"adds every line candidate {covered.number} adds, and more: it would share whatever "
                f"the gate finds wrong with that one"
                + (" (it found harm or errors)" if covered in refused else ""))
    return None


def gate_targets(candidate: dict[tuple[str, str], list[float]], base: dict[tuple[str, str], list[float]],
                 targets: Iterable[tuple[str, str]]) -> tuple[list[str], list[tuple[str, float, float]]]:
    """The targets a promoted candidate goes to the gate for: those where its screening scores
    are above the base prompt's at `KEEP_TARGET_P` (a target without screening scores on either
    side is kept; when none is kept, the one with the smallest p-value is). The gate requires
    every target it tests to improve, on fresh trials, so a target the screening shows no clear
    gain on (typically one the base prompt already mostly passes) would only sink a candidate
    that helps the others; it is checked for harm with the other buckets instead. Choosing the
    targets on screening trials is sound because the gate never judges on them. Returns the
    kept names and the dropped ones with both screening means."""
    kept, dropped, best = [], [], None
    for bucket in sorted(targets):
        name = "/".join(bucket)
        mine, theirs = candidate.get(bucket), base.get(bucket)
        if not (mine and theirs):
            kept.append(name)
            continue
        p = welch_greater_p(mine, theirs) if _mean(mine) > _mean(theirs) else 1.0
        if best is None or p < best[0]:
            best = (p, name)
        if p < KEEP_TARGET_P:
            kept.append(name)
        else:
            dropped.append((name, _mean(mine), _mean(theirs)))
    if not kept:
        if best is None or best[0] >= 1.0:
            return ["/".join(bucket) for bucket in sorted(targets)], []
        kept = [best[1]]
        dropped = [entry for entry in dropped if entry[0] != best[1]]
    return kept, dropped


def _pooled(buckets: dict[tuple[str, str], list[float]]) -> list[float]:
    """Every bucket's scores in one sample."""
    return [value for values in buckets.values() for value in values]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
