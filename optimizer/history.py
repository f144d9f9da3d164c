"""What has happened in this repository: nightly jobs, iterations with their decisions, runs with
their per-bucket scores, and what each cost (from the ledger), as DataFrames."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd
from pydantic import ValidationError

from optimizer.provenance import RunSpec, changed_parts
from optimizer.store import Store

ROLES = ("agent", "judge", "patcher")


@dataclass
class History:
    nightlies: pd.DataFrame
    iterations: pd.DataFrame
    runs: pd.DataFrame
    bucket_scores: pd.DataFrame
    """One row per suite/bucket, one column per run (oldest first): the bucket's mean task score."""
    cost_by_role: pd.DataFrame


def costs_by(ledger: pd.DataFrame, key: str) -> pd.DataFrame:
    """Ledger rows summed per `key` (e.g. iteration_id): cost per role, total cost, tokens, calls."""
    if ledger.empty:
        return pd.DataFrame(columns=[key, *(f"{role}_usd" for role in ROLES), "cost_usd", "tokens", "calls"])
    ledger = ledger.assign(tokens=ledger["prompt_tokens"] + ledger["completion_tokens"])
    by_role = ledger.pivot_table(index=key, columns="role", values="cost_usd", aggfunc="sum", fill_value=0.0)
    for role in ROLES:
        if role not in by_role:
            by_role[role] = 0.0
    by_role = by_role[list(ROLES)].rename(columns={role: f"{role}_usd" for role in ROLES})
    totals = ledger.groupby(key).agg(cost_usd=("cost_usd", "sum"), tokens=("tokens", "sum"), calls=("calls", "sum"))
    return by_role.join(totals).reset_index()


def load_history(store: Store, limit: int = 20) -> History:
    ledger = store.ledger_frame()
    nightly_rows = []
    for row in store.nightlies()[-limit:]:
        state = row.get("state") or {}
        nightly_rows.append({"nightly_id": row["nightly_id"], "branch": row["branch"], "status": row["status"],
                             "iterations": len(state.get("iterations") or []), "accepted": state.get("accepted", 0),
                             "stop_reason": state.get("stop_reason", ""), "cost_usd": state.get("spent_usd", 0.0),
                             "tokens": state.get("spent_tokens", 0)})
    iteration_rows = []
    proposals = store.proposals()
    for row in store.iterations()[-limit:]:
        mine = [p for p in proposals if p["iteration_id"] == row["iteration_id"]]
        iteration_rows.append({"iteration_id": row["iteration_id"], "agent": row.get("agent"),
                               "targets": ", ".join(row.get("targets") or []), "status": row["status"],
                               "proposals": len(mine),
                               "decision": "; ".join(p["reason"] for p in mine)[:160],
                               "rollouts": (row.get("summary") or {}).get("rollouts")})
    iterations = pd.DataFrame(iteration_rows)
    if not iterations.empty:
        iterations = iterations.merge(costs_by(ledger, "iteration_id"), on="iteration_id", how="left").fillna(
            {column: 0 for column in (*(f"{role}_usd" for role in ROLES), "cost_usd", "tokens", "calls")})
    runs_frame = store.runs_frame()
    specs = spec_lines(runs_frame)
    run_rows, score_rows = [], []
    for row in runs_frame.tail(limit).itertuples():
        summary = json.loads(row.summary_json) if isinstance(row.summary_json, str) else {}
        totals = summary.get("totals") or {}
        suites = summary.get("suites") or []
        run_rows.append({"run_id": row.run_id, "kind": row.kind, "status": row.status,
                         "trials": totals.get("trials"), "passed": totals.get("passed"),
                         "errored": totals.get("errored"),
                         "mean_score": suites[0]["mean_score"] if len(suites) == 1 else None,
                         "cost_usd": totals.get("cost_usd"), **specs[row.run_id]})
        for bucket in summary.get("buckets") or []:
            score_rows.append({"bucket": f"{bucket['suite']}/{bucket['bucket']}",
                               "run": f"{row.kind} {row.run_id[-6:]}", "score": bucket.get("mean_score")})
    scores = pd.DataFrame(score_rows)
    if not scores.empty:
        order = list(dict.fromkeys(scores["run"]))
        scores = scores.pivot_table(index="bucket", columns="run", values="score", aggfunc="first")[order]
        scores = scores.reset_index().rename_axis(None, axis=1)
    return History(nightlies=pd.DataFrame(nightly_rows), iterations=iterations, runs=pd.DataFrame(run_rows),
                   bucket_scores=scores, cost_by_role=costs_by(ledger.assign(all="all"), "all")
                   if not ledger.empty else costs_by(ledger, "all"))


def spec_lines(runs: pd.DataFrame) -> dict[str, dict[str, str | None]]:
    """Per run id: its spec in short form (`spec`: commit, dirty flag, package versions) and what
    changed in it since the run of the same kind before it (`spec_changes`, e.g.
    `agents.card_agent.code`; None for the first run of its kind, "" when nothing changed). A
    run recorded before run specs existed shows neither."""
    lines: dict[str, dict[str, str | None]] = {}
    previous: dict[str, dict] = {}
    for row in runs.itertuples():
        recorded = json.loads(row.fingerprints_json) if isinstance(row.fingerprints_json, str) else {}
        try:
            spec = RunSpec.model_validate(recorded)
        except ValidationError:
            lines[row.run_id] = {"spec": None, "spec_changes": None}
            continue
        before = previous.get(row.kind)
        lines[row.run_id] = {"spec": spec.short(),
                             "spec_changes": None if before is None else ", ".join(summarized(
                                 changed_parts(before, recorded)))}
        previous[row.kind] = recorded
    return lines


def summarized(parts: list[str]) -> list[str]:
    """Changed spec parts with the graders' collapsed: one edit to `graders/` changes the
    `package` of every grader, shown once as `graders.*.package`."""
    shown: list[str] = []
    for part in parts:
        head, _, rest = part.partition(".")
        name, _, field = rest.partition(".")
        if head == "graders" and field and sum(p.startswith("graders.") and p.endswith(f".{field}")
                                               for p in parts) > 1:
            part = f"graders.*.{field}"
        if part not in shown:
            shown.append(part)
    return shown
