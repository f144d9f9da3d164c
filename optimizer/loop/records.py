"""What an iteration of the loop records: its proposals, its result, and their summaries in the
store and in the iteration's folder (`optimizer.loop.iteration` runs the iteration)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from optimizer import gitops
from optimizer.files import write_json
from optimizer.gate import Decision
from optimizer.proposal.request import Selection
from optimizer.proposal.pool import SearchOutcome, save_records
from optimizer.settings.parts import ProposalSettings, SettingsParts
from optimizer.store import ProposalRow, Store
from optimizer.types import Trial, Usage

Log = Callable[[str], None]


@dataclass
class ProposalRecord:
    ordinal: int
    branch: str
    status: str
    """accepted | rejected_gate | rejected_check | no_patch | superseded | stopped (the proposer
    changed the user's checkout; the iteration ends there)"""
    reason: str
    rationale: str = ""
    diff: str = ""
    decision: Decision | None = None
    candidate_run_id: str | None = None
    commit_sha: str | None = None
    rollouts: int = 0
    model_rollouts: int = 0
    """Of `rollouts`, the trials that called the model (the rest were served from the cache)."""
    batches: int = 0
    """Batches of pairs the comparison ran (each followed by a look of the sequential tests)."""
    usage: Usage = field(default_factory=Usage)
    proposal_id: int | None = None


@dataclass
class IterationResult:
    iteration_id: str
    status: str
    """accepted | rejected | nothing_to_fix | dry_run | stopped"""
    base: gitops.Base
    run_dir: Path
    baseline_run_id: str | None = None
    baseline_reused: bool = False
    base_runs: list[str] = field(default_factory=list)
    """The runs holding the base prompt's fresh trials the gate paired with candidates: this
    iteration's confirm run and the earlier ones on the same base it took in (the viewer pairs
    by them)."""
    selection: Selection | None = None
    request_path: Path | None = None
    report_path: Path | None = None
    proposals: list[ProposalRecord] = field(default_factory=list)
    rollouts: int = 0
    """Trials run by this iteration (baseline unless reused, confirmation, candidates)."""
    model_rollouts: int = 0
    """Of `rollouts`, the trials that called the model (the rest were served from the cache)."""
    screen_rollouts: int = 0
    """Of `rollouts`, the screening trials (target confirmation and the search), never judged by the gate."""
    skipped: list[str] = field(default_factory=list)
    """Targets the baseline saw failing and a fresh confirmation did not (skipped this iteration)."""
    search: SearchOutcome | None = None

    @property
    def accepted(self) -> ProposalRecord | None:
        return next((p for p in self.proposals if p.status == "accepted"), None)


@dataclass
class LoopContext:
    settings: SettingsParts
    """The parts of the settings the command read (`Settings.parts`); a resumed night swaps in
    the ones it stored."""
    project_root: Path
    store: Store
    log: Log = print
    on_trial: Callable[[Trial], None] | None = None
    make_progress: Callable[[int, str], Any] | None = None
    """Returns a context manager with `.update(trial)`, for progress display."""


def store_proposal(store: Store, result: IterationResult, record: ProposalRecord, agent: str, proposer: str,
                   settings: ProposalSettings, manual_sha: str) -> None:
    record.proposal_id = store.proposals.add(ProposalRow(
        iteration_id=result.iteration_id, ordinal=record.ordinal, agent=agent, branch=record.branch,
        proposer=proposer, patcher_model=settings.patcher_model if proposer == "llm" else None,
        manual_sha256=manual_sha, status=record.status, reason=record.reason, rationale=record.rationale,
        diff=record.diff, commit_sha=record.commit_sha if record.status == "accepted" else None,
        candidate_run_id=record.candidate_run_id, decision=record.decision.as_dict() if record.decision else None,
        usage=record.usage.model_dump(), rollouts=record.rollouts))


def save_search(result: IterationResult, outcome: SearchOutcome) -> None:
    """The search's record: every candidate, its screening scores and what became of it, in the
    iteration's folder (`search.json`, read by `review` and the report) and in the pool's."""
    save_records(outcome.folder, outcome.candidates)
    write_json(result.run_dir / "search.json", search_summary(outcome))


def search_summary(outcome: SearchOutcome) -> dict[str, Any]:
    return {"pool": str(outcome.folder), "rollouts": outcome.rollouts, "base_score": outcome.base_score,
            "base_target_score": outcome.base_target_score,
            "candidates": [candidate.summary() for candidate in outcome.candidates]}


def iteration_summary(result: IterationResult) -> dict[str, Any]:
    """The iteration as the store's summary and `optimizer run --json` hold it."""
    return {"status": result.status, "baseline_run_id": result.baseline_run_id,
            "baseline_reused": result.baseline_reused, "base_runs": result.base_runs, "rollouts": result.rollouts,
            "screen_rollouts": result.screen_rollouts, "skipped_targets": result.skipped,
            "search": search_summary(result.search) if result.search else None,
            "request": str(result.request_path) if result.request_path else None,
            "report": str(result.report_path) if result.report_path else None,
            "proposals": [{"ordinal": p.ordinal, "branch": p.branch, "status": p.status, "reason": p.reason,
                           "rollouts": p.rollouts, "batches": p.batches, "patcher_cost_usd": p.usage.cost_usd,
                           "patcher_tokens": p.usage.total_tokens} for p in result.proposals]}
