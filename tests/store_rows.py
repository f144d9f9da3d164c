"""Stores built by hand, row by row, for the tests of `optimizer history`, the report and the
quick store (tests/optimizer/reporting/, tests/optimizer/store/test_quick.py) and for
benchmarks/startup.py: finished runs with bucket means, iterations with their proposals, nights and
ledger entries."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from optimizer.ledger import LedgerEntry
from optimizer.store import ProposalRow, Store
from optimizer.types import RunResult

START = datetime(2026, 11, 23, 1, 0, tzinfo=timezone.utc)


def add_run(store: Store, run_id: str, kind: str, buckets: dict[str, float | None], minute: int,
            status: str = "completed") -> str:
    """A finished run of the card suite whose summary holds these bucket means."""
    store.runs.start(RunResult(run_id=run_id, started_at=START + timedelta(minutes=minute)), kind=kind)
    rows = [{"suite": "card_agent", "bucket": bucket, "mean_score": score} for bucket, score in buckets.items()]
    errored = sum(score is None for score in buckets.values())
    store.runs.finish(run_id, status, {"totals": {"trials": len(rows), "passed": 0, "errored": errored},
                                      "suites": [], "buckets": rows})
    return run_id


def add_iteration(store: Store, iteration_id: str, baseline_run_id: str, targets: list[str], status: str,
                  proposals: list[dict] = ()) -> str:
    """An iteration of card_agent with its proposals: dicts of `status`, `candidate_run_id` and
    the decision's `buckets` (suite, bucket, before, after, change, targeted)."""
    store.iterations.start(iteration_id, kind="run", base_ref="main", base_commit="c0ffee" * 7, settings={})
    store.iterations.set_targets(iteration_id, agent="card_agent", targets=targets, baseline_run_id=baseline_run_id)
    store.iterations.finish(iteration_id, status, {"rollouts": 10})
    for ordinal, proposal in enumerate(proposals, start=1):
        store.proposals.add(ProposalRow(
            iteration_id=iteration_id, ordinal=ordinal, agent="card_agent",
            branch=f"optimizer/{iteration_id}-{ordinal}", proposer="llm", status=proposal["status"],
            reason=proposal["status"], candidate_run_id=proposal.get("candidate_run_id"),
            decision={"rules": [], "buckets": proposal.get("buckets", [])}, rollouts=10))
    return iteration_id


def add_nightly(store: Store, nightly_id: str, iteration_ids: list[str], accepted: int) -> None:
    state = {"iterations": [{"iteration_id": i} for i in iteration_ids], "accepted": accepted,
             "stop_reason": "max iterations"}
    store.nightlies.start(nightly_id, branch=f"optimizer/nightly-{nightly_id}", base_ref="main",
                          base_commit="c0ffee" * 7, settings={}, state=state)
    store.nightlies.save(nightly_id, "finished", "beef" * 10, state)


def ledger_entry(role: str, iteration_id: str | None, cost: float, tokens: int) -> LedgerEntry:
    return LedgerEntry(at=START, role=role, model="mock/sim", iteration_id=iteration_id, calls=1,
                       prompt_tokens=tokens, completion_tokens=0, cost_usd=cost)
