"""Search before the gate: a pool of candidate prompts screened on the `gepa` engine.

The gate (`optimizer.comparison.compare`) judges one candidate at a time and needs a good one to reach it:
with a weak patcher most single proposals are useless or harmful. This module spends a
screening budget (`search_rollouts`) on gepa's search first: gepa keeps the pool, picks parents
by Pareto selection over the screening tasks, samples minibatches and accepts a child into the
pool when it beats its parent there; we supply the pieces that make it ours:

* `ScreeningAdapter`, a `GEPAAdapter` over our runner: `evaluate` runs the agent with the
  candidate prompt on train tasks through the normal runner (cache, store, ledger, budgets),
  at trial indexes of a range of its own (`SCREEN_INDEX` and up), so no screening trial is ever
  one the gate later judges on; `make_reflective_dataset` turns the failing trials into the
  failure records of `request.md` (train split only: holdout tasks are never screened).
* `SearchProposer`, gepa's `custom_candidate_proposer`: renders a request as the loop does,
  asks our proposer (`llm` or `command`) for a patch in our formats, and hands gepa only a patch
  that passes the pre-rollout checks against the iteration's base prompt; one that does not
  costs no rollout.
* `promote_candidates`: which of the pool go to the gate. Only candidates that beat the base
  prompt on the targeted tasks (one-sided Welch test at `SCREEN_ALPHA`); the narrowest patch
  first (fewest changed lines: a patch that adds a sentence nothing asked for is where harm
  hides), then the best screening score (the mean over the screening set, other buckets
  included when the budget allows); at most `PROMOTE`, and never one that adds every line an
  earlier promoted one adds, or one the gate already found harming or erroring (a descendant in
  the pool carries its parent's sentences, harmful ones included: gating both pays twice for one
  fault). The gate then judges them on fresh trials only (the winner's curse: a candidate
  chosen for its screening scores is lucky on exactly those trials).

The pool lives in a folder keyed by the agent, base prompt and targets (`pool_folder`): gepa's
own `run_dir` (its state, resumable) plus our records of every candidate. A run killed mid-search,
or a later night at the same base and targets, continues the same pool with a fresh budget.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from optimizer.proposal import gepa_adapter
from optimizer.proposal.diffs import added_lines
from optimizer.proposal.diffs import size as diff_size
from optimizer.files import write_json, write_text
from optimizer.trials.runner import PlannedTrial
from optimizer.scoring import trial_value
from optimizer.stats import welch_greater_p
from optimizer.types import Trial

COMPONENT = "system_prompt"
"""The one component of a gepa candidate: the targeted agent's system prompt."""
SCREEN_INDEX = 1_000_000
"""First trial index of screening trials. The gate's fresh trials count up from the baseline's
trials (a few per task), so the two ranges never meet."""
MINIBATCH = 3
"""gepa's default reflection minibatch."""
TARGET_COPIES = 4
"""Each targeted task appears at least this often in the screening set (a one-task bucket would
otherwise be judged on one trial per candidate)."""
HARM_SCREENS = 4
"""A budget that affords this many screens of every train task also screens the other buckets
(a candidate that breaks one then ranks low); a smaller one screens the targets only and leaves
harm to the gate."""
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
OPEN = ("screened_out", "pool", "not_promoted", "promoted")
"""Statuses of a candidate the gate has not judged (`promoted`: a run killed before its verdict)."""

RunTrials = Callable[[list[PlannedTrial], str, str], list[Trial]]
"""(planned trials, prompt text, label) -> trials, run through the normal runner."""


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Example:
    """One screening instance for gepa: a train task (a copy number when a task is repeated)."""

    suite: str
    task_id: str
    copy: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return self.suite, self.task_id


def screening_sets(planned: list[PlannedTrial], targets: Iterable[tuple[str, str]], agent: str,
                   budget: int) -> tuple[list[Example], list[Example]]:
    """gepa's trainset (the targeted buckets' train tasks, repeated to fill a minibatch and
    `TARGET_COPIES`) and valset (those, plus one of every other train task of the agent when the
    budget affords `HARM_SCREENS` screens of them all)."""
    targets = set(targets)
    tasks: dict[tuple[str, str], PlannedTrial] = {}
    for item in planned:
        if item.task.split == "train" and item.suite.spec.agent_name == agent and item.suite.spec.kind == "capability":
            tasks.setdefault((item.suite.name, item.task.id), item)
    targeted = sorted(key for key, item in tasks.items() if (key[0], item.task.bucket) in targets)
    copies = max(TARGET_COPIES, math.ceil(MINIBATCH / max(1, len(targeted)))) if targeted else 0
    train = [Example(suite, task, copy) for copy in range(copies) for suite, task in targeted]
    others = sorted(key for key in tasks if key not in set(targeted))
    val = list(train)
    if budget >= HARM_SCREENS * (len(train) + len(others)):
        val += [Example(suite, task) for suite, task in others]
    return train, val


class ScreeningAdapter:
    """gepa's view of our runner (the `GEPAAdapter` protocol). See the module docstring."""

    propose_new_texts = None
    """Proposals come from `SearchProposer` (gepa's `custom_candidate_proposer`)."""

    def __init__(self, items: dict[tuple[str, str], PlannedTrial], run: RunTrials, *,
                 targets: Iterable[tuple[str, str]], failures: Callable[[list[Trial]], list[dict[str, Any]]]):
        self.items, self.run, self.failures = items, run, failures
        self.targets = set(targets)
        self.next_index: dict[str, int] = {}
        self.screened: list[tuple[str, str, int]] = []
        """Every screening trial (suite, task, index), for the record and the tests."""
        self.evaluations: dict[str, list[list[float]]] = {}
        """Per candidate (text sha), the scores of each batch it was evaluated on, in order."""
        self.last: tuple[str, list[float]] | None = None
        self.rollouts = 0
        self.confirmed: list[tuple[str, tuple[str, str], float]] = []
        """(prompt sha, task key, score) of every confirmation trial: fresh base-prompt trials of
        the targets, run before anything was proposed, so part of the base prompt's screening."""

    def plan(self, keys: list[tuple[str, str]]) -> list[PlannedTrial]:
        """One trial per key at the next unused screening index of its task."""
        out = []
        for key in keys:
            name = "/".join(key)
            index = self.next_index.get(name, SCREEN_INDEX)
            self.next_index[name] = index + 1
            item = self.items[key]
            out.append(PlannedTrial(item.suite, item.task, index))
        return out

    def trials(self, keys: list[tuple[str, str]], prompt: str, label: str) -> list[Trial]:
        planned = self.plan(keys)
        trials = self.run(planned, prompt, label)
        by_key = {(t.suite, t.task_id, t.index): t for t in trials}
        self.screened += [(p.suite.name, p.task.id, p.index) for p in planned]
        self.rollouts += len(planned)
        return [by_key[(p.suite.name, p.task.id, p.index)] for p in planned]

    def evaluate(self, batch: list[Example], candidate: dict[str, str], capture_traces: bool = False):
        prompt = candidate[COMPONENT]
        trials = self.trials([example.key for example in batch], prompt, f"screening {text_sha(prompt)[:8]}")
        scores = [trial_value(trial.score, trial.status) for trial in trials]
        self.evaluations.setdefault(text_sha(prompt), []).append(scores)
        self.last = (text_sha(prompt), scores)
        outputs = [(trial.suite, trial.task_id, trial.index) for trial in trials]
        return gepa_adapter.evaluation_batch(outputs, scores, trials if capture_traces else None)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch, components_to_update: list[str]):
        return {name: self.failures(list(eval_batch.trajectories or [])) for name in components_to_update}

    def confirm(self, prompt: str, keys: list[tuple[str, str]], trials: int) -> list[Trial]:
        """`trials` fresh screening trials of the base prompt spread over `keys` (whole rounds):
        whether a target the baseline saw failing still fails."""
        rounds = math.ceil(trials / len(keys)) if keys else 0
        keys = [key for _ in range(rounds) for key in keys]
        trials = self.trials(keys, prompt, "confirmation (base prompt)")
        self.confirmed += [(text_sha(prompt), key, trial_value(trial.score, trial.status))
                           for key, trial in zip(keys, trials)]
        return trials

    def get_adapter_state(self) -> dict[str, Any]:
        return {"next_index": dict(self.next_index)}

    def set_adapter_state(self, state: dict[str, Any]) -> None:
        for name, index in (state.get("next_index") or {}).items():
            self.next_index[name] = max(index, self.next_index.get(name, SCREEN_INDEX))


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


class SearchProposer:
    """gepa's `custom_candidate_proposer`: our request, our proposer, our pre-rollout checks."""

    def __init__(self, adapter: ScreeningAdapter, *, render: Callable[[str, list[dict[str, Any]]], str],
                 propose: Callable[[Path, str, int], tuple[str | None, str, str | None]],
                 check: Callable[[str], str | None], diff: Callable[[str], str], records: list[Candidate],
                 folder: Path, log: Callable[[str], None]):
        self.adapter, self.render, self._propose, self.check, self.diff = adapter, render, propose, check, diff
        self.records, self.folder, self.log = records, folder, log
        self.stopped: BaseException | None = None
        """What ended the search from inside a proposal (gepa would log it and go on): raised
        again once gepa has stopped."""

    def should_stop(self, state=None) -> bool:
        """gepa's stop callback: the search ends at the first proposal that raised."""
        return self.stopped is not None

    def __call__(self, candidate: dict[str, str], reflective_dataset, components_to_update: list[str]) -> dict[str, str]:
        if self.stopped is not None:
            return {}
        try:
            return self._candidate(candidate, reflective_dataset)
        except BaseException as exc:  # noqa: BLE001 - handed back to the loop by run_search
            self.stopped = exc
            return {}

    def _candidate(self, candidate: dict[str, str], reflective_dataset) -> dict[str, str]:
        parent = candidate[COMPONENT]
        number = len(self.records) + 1
        request = self.render(parent, list(reflective_dataset.get(COMPONENT, [])))
        request_path = self.folder / f"request-{number}.md"
        write_text(request_path, request)
        patched, rationale, error = self._propose(request_path, parent, number)
        record = Candidate(number=number, sha=text_sha(patched) if patched else "", parent=text_sha(parent),
                           status="", rationale=rationale, parent_minibatch=list(self.adapter.last[1])
                           if self.adapter.last else [])
        self.records.append(record)
        if error or patched is None:
            record.status, record.reason = "no_patch", error or "the proposer made no change"
        elif patched == parent or any(r.sha == record.sha and r is not record and r.status != "no_patch"
                                      for r in self.records):
            record.status, record.reason = "unchanged", "the same prompt as its parent or an earlier candidate"
        else:
            record.diff, record.text = self.diff(patched), patched
            problem = self.check(patched)
            if problem:
                record.status, record.reason = "rejected_check", problem
            else:
                record.status = "screened_out"
        screening = record.status == "screened_out"  # until gepa keeps it in its pool
        self.log(f"search candidate {number}: " + ("made, screened on gepa's minibatch next" if screening else
                                                   record.status + (': ' + record.reason if record.reason else '')))
        return {COMPONENT: patched} if screening else {}


def faulty(records: list[Candidate]) -> list[Candidate]:
    """Candidates the gate judged and found harming or erroring (not merely not improving):
    whatever did it is among the lines they add."""
    return [record for record in records if set(record.failed_rules) - {"improvement"}]


def carries(text: str, record: Candidate) -> bool:
    """Whether a prompt holds every line `record` added to its base prompt."""
    return set(added_lines(record.diff)) <= {line.strip() for line in text.splitlines()}


def parent_selector(records: list[Candidate], seed: int):
    """gepa's Pareto selection of the next parent, leaving out every pool member that carries the
    lines of a candidate the gate found harmful (`faulty`): a continued pool would otherwise
    keep mutating the lineage the gate already refused. The base prompt always remains."""
    import random

    blocked = faulty(records)
    rng = random.Random(seed)

    def select(state) -> int:
        barred = {index for index, candidate in enumerate(state.program_candidates)
                  if index and any(carries(candidate[COMPONENT], record) for record in blocked)}
        fronts = {key: programs - barred for key, programs in state.get_pareto_front_mapping().items()}
        fronts = {key: programs for key, programs in fronts.items() if programs}
        if not fronts:
            return 0
        return gepa_adapter.pareto_parent(fronts, state.per_program_tracked_scores, rng)

    return gepa_adapter.candidate_selector(select)


class _FileLog:
    """gepa's logger, writing to a file in the pool folder (its chatter stays off the console)."""

    def __init__(self, path: Path):
        self.path = path

    def log(self, message: str) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(message.rstrip("\n") + "\n")


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


def save_records(folder: Path, records: list[Candidate]) -> None:
    write_json(folder / "candidates.json", [asdict(record) for record in records])


def run_search(adapter: ScreeningAdapter, proposer: SearchProposer, *, base_prompt: str, train: list[Example],
               val: list[Example], budget: int, folder: Path, seed: int, promote: int = PROMOTE,
               iteration: str = "", resumes: Iterable[str] = ()) -> SearchOutcome:
    """gepa's search for `budget` more rollouts in `folder` (continuing a pool found there),
    then the promotion rule. The budget counts from where `iteration` started in the pool, or,
    when it runs in place of interrupted iterations (`resumes`), from where the first of them
    started: a search killed and resumed spends its budget once."""
    gepa_dir = folder / "gepa"
    gepa_dir.mkdir(parents=True, exist_ok=True)
    spent = _budget_start(folder, gepa_adapter.spent_evaluations(gepa_dir), iteration, resumes)
    start = adapter.rollouts
    selection = parent_selector(proposer.records, seed) if faulty(proposer.records) else "pareto"
    try:
        result = gepa_adapter.optimize(seed_candidate={COMPONENT: base_prompt}, trainset=train, valset=val,
                                       adapter=adapter, custom_candidate_proposer=proposer,
                                       reflection_minibatch_size=MINIBATCH, candidate_selection_strategy=selection,
                                       max_metric_calls=spent + budget, run_dir=str(gepa_dir), seed=seed,
                                       logger=_FileLog(folder / "gepa.log"), track_best_outputs=False,
                                       display_progress_bar=False, raise_on_exception=True,
                                       stop_callbacks=[proposer.should_stop])
    finally:
        save_records(folder, proposer.records)
    if proposer.stopped is not None:
        raise proposer.stopped
    record_minibatch(proposer.records, adapter)
    base_sha = text_sha(base_prompt)
    buckets = {key: (key[0], item.task.bucket) for key, item in adapter.items.items()}
    confirmed = [(buckets[key], score) for sha, key, score in adapter.confirmed
                 if sha == base_sha and buckets[key] in adapter.targets]
    outcome = promote_candidates(result, proposer.records, val, adapter.targets, adapter.items, limit=promote,
                                 base_extra=confirmed)
    outcome.folder, outcome.rollouts = folder, adapter.rollouts - start
    save_records(folder, proposer.records)
    return outcome


def _budget_start(folder: Path, spent: int, iteration: str, resumes: Iterable[str]) -> int:
    """Where `iteration`'s budget counts from in the pool at `folder`, now `spent` evaluations in:
    where the first of the interrupted iterations it `resumes` started, else `spent`; kept in
    `starts.json` beside the pool."""
    path = folder / "starts.json"
    starts = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    start = min((starts[name] for name in resumes if name in starts), default=spent)
    if iteration:
        write_json(path, {**starts, iteration: start})
    return start


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


def record_minibatch(records: list[Candidate], adapter: ScreeningAdapter) -> None:
    """Each candidate's own first evaluation is its minibatch screen (gepa evaluates a child on
    its parent's minibatch before anything else)."""
    for record in records:
        if record.sha in adapter.evaluations and not record.minibatch:
            record.minibatch = list(adapter.evaluations[record.sha][0])
