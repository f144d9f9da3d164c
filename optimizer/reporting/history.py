"""What has happened in this repository: nightly jobs, iterations with their decisions, runs with
their per-bucket scores, and what each cost (from the ledger), as tables of plain rows.

The tables are small and `optimizer history` is a command a user waits for, so nothing here
imports pandas, nor SQLAlchemy for a SQLite store (`optimizer.store.quick`): the rows come
straight from the store, the ledger summed by the database."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from optimizer.reporting.recorded_spec import changed_parts, short_spec

if TYPE_CHECKING:
    from optimizer.store import Store
    from optimizer.store.quick import QuickStore

Source = Union["Store", "QuickStore"]
"""What the history is read from: the `Store`, or a SQLite store read without SQLAlchemy."""

ROLES = ("agent", "judge", "patcher")
COST_COLUMNS = (*(f"{role}_usd" for role in ROLES), "cost_usd", "tokens", "calls")

Row = dict[str, Any]


@dataclass
class History:
    """Each table is a list of rows with the same keys, in column order."""

    nightlies: list[Row]
    iterations: list[Row]
    runs: list[Row]
    bucket_scores: list[Row]
    """One row per suite/bucket: `bucket`, then one key per run that scored buckets (oldest
    first), `"<kind> <last 6 of the run id>"`: the bucket's mean task score, None when the run
    has none (a fully errored run keeps its column)."""
    cost_by_role: list[Row]


def costs_by(store: Source, key: str | None = None) -> dict[Any, Row]:
    """The ledger summed per `key` (e.g. `iteration_id`; everything under None without one): the
    cost of each role in `ROLES`, the total cost (every role), tokens and calls."""
    costs: dict[Any, Row] = {}
    for row in store.ledger.sums(key):
        cost = costs.setdefault(row["key"], no_cost())
        if row["role"] in ROLES:
            cost[f"{row['role']}_usd"] += row["cost_usd"]
        for column in ("cost_usd", "tokens", "calls"):
            cost[column] += row[column]
    return costs


def no_cost() -> Row:
    return {column: 0 if column in ("tokens", "calls") else 0.0 for column in COST_COLUMNS}


def load_history(store: Source, limit: int = 20) -> History:
    nightly_rows = []
    for row in store.nightlies.rows()[-limit:]:
        state = row.get("state") or {}
        nightly_rows.append({"nightly_id": row["nightly_id"], "branch": row["branch"], "status": row["status"],
                             "iterations": len(state.get("iterations") or []), "accepted": state.get("accepted", 0),
                             "stop_reason": state.get("stop_reason", ""), "cost_usd": state.get("spent_usd", 0.0),
                             "tokens": state.get("spent_tokens", 0)})
    costs = costs_by(store, "iteration_id")
    proposals = store.proposals.rows()
    iteration_rows = []
    for row in store.iterations.rows()[-limit:]:
        mine = [p for p in proposals if p["iteration_id"] == row["iteration_id"]]
        iteration_rows.append({"iteration_id": row["iteration_id"], "agent": row.get("agent"),
                               "targets": ", ".join(row.get("targets") or []), "status": row["status"],
                               "proposals": len(mine),
                               "decision": "; ".join(p["reason"] for p in mine)[:160],
                               "rollouts": (row.get("summary") or {}).get("rollouts"),
                               **costs.get(row["iteration_id"], no_cost())})
    specs = spec_lines(store.runs.rows("run_id", "kind", "fingerprints_json"))
    runs = store.runs.rows("run_id", "kind", "status", "summary_json", last=limit)
    run_rows = []
    for row in runs:
        summary = row.get("summary") or {}
        totals = summary.get("totals") or {}
        suites = summary.get("suites") or []
        run_rows.append({"run_id": row["run_id"], "kind": row["kind"], "status": row["status"],
                         "trials": totals.get("trials"), "passed": totals.get("passed"),
                         "errored": totals.get("errored"),
                         "mean_score": suites[0]["mean_score"] if len(suites) == 1 else None,
                         "cost_usd": totals.get("cost_usd"), **specs[row["run_id"]]})
    total = costs_by(store).get(None)
    return History(nightlies=nightly_rows, iterations=iteration_rows, runs=run_rows,
                   bucket_scores=bucket_scores(runs), cost_by_role=[{"all": "all", **total}] if total else [])


def bucket_scores(runs: list[Row]) -> list[Row]:
    """Per suite/bucket (sorted), its mean score in each run (decoded `summary`) that lists
    buckets; see `History.bucket_scores`."""
    scores: dict[str, Row] = {}
    columns: dict[str, None] = {}
    for run in runs:
        buckets = (run.get("summary") or {}).get("buckets") or []
        label = f"{run['kind']} {run['run_id'][-6:]}"
        if buckets:
            columns[label] = None
        for bucket in buckets:
            cells = scores.setdefault(f"{bucket['suite']}/{bucket['bucket']}", {})
            if cells.get(label) is None:
                cells[label] = bucket.get("mean_score")
    return [{"bucket": bucket, **{label: scores[bucket].get(label) for label in columns}}
            for bucket in sorted(scores)]


def spec_lines(runs: list[Row]) -> dict[str, dict[str, str | None]]:
    """Per run id (of `runs`, oldest first, with `run_id`, `kind` and decoded `fingerprints`): its
    spec in short form (`spec`: commit, dirty flag, package versions) and what changed in it
    since the run of the same kind before it (`spec_changes`, e.g. `agents.card_agent.code`;
    None for the first run of its kind, "" when nothing changed). A run recorded before run
    specs existed shows neither."""
    lines: dict[str, dict[str, str | None]] = {}
    previous: dict[str, dict] = {}
    for row in runs:
        recorded = row.get("fingerprints")
        short = short_spec(recorded)
        if short is None:
            lines[row["run_id"]] = {"spec": None, "spec_changes": None}
            continue
        before = previous.get(row["kind"])
        lines[row["run_id"]] = {"spec": short,
                                "spec_changes": None if before is None else ", ".join(summarized(
                                    changed_parts(before, recorded)))}
        previous[row["kind"]] = recorded
    return lines


def summarized(parts: list[str]) -> list[str]:
    """Changed spec parts with a field that changed in several entries of one kind shown once,
    with how many: one edit to `graders/` changes the `package` of every grader
    (`graders.*.package (6)`), a new `--trials` the `trials` of every task (`tasks.*.trials (25)`)."""
    def entry(part: str) -> tuple[str, str] | None:
        head, _, rest = part.partition(".")
        field = rest.rpartition(".")[2] if "." in rest else ""
        return (head, field) if field else None

    counts = Counter(key for key in map(entry, parts) if key)
    shown: list[str] = []
    for part in parts:
        key = entry(part)
        if key and counts[key] > 1:
            part = f"{key[0]}.*.{key[1]} ({counts[key]})"
        if part not in shown:
            shown.append(part)
    return shown
