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

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from optimizer.proposal import gepa_adapter
from optimizer.files import write_json, write_text
from optimizer.proposal.pool import (PROMOTE, UNCHANGED_IN_A_ROW, Candidate, SearchOutcome, carries, faulty,
                                     nothing_new, promote_candidates, save_records)
from optimizer.proposal.screening import COMPONENT, MINIBATCH, Example, ScreeningAdapter, text_sha


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
        """gepa's stop callback: the search ends at the first proposal that raised, or after
        `UNCHANGED_IN_A_ROW` candidates in a row that were the same prompt as their parent or an
        earlier candidate (the proposer has nothing new to offer, e.g. the `example` format once
        every worked example of the targets was shown: each further try would spend a minibatch
        of screening trials on the parent for nothing)."""
        return self.stopped is not None or nothing_new(self.records)

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
        if nothing_new(self.records):
            self.log(f"search: {UNCHANGED_IN_A_ROW} candidates in a row unchanged, nothing new to screen: "
                     f"the search ends")
        return {COMPONENT: patched} if screening else {}


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


def record_minibatch(records: list[Candidate], adapter: ScreeningAdapter) -> None:
    """Each candidate's own first evaluation is its minibatch screen (gepa evaluates a child on
    its parent's minibatch before anything else)."""
    for record in records:
        if record.sha in adapter.evaluations and not record.minibatch:
            record.minibatch = list(adapter.evaluations[record.sha][0])
