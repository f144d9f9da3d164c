"""`optimizer report --html`: one self-contained HTML page about a night or an iteration.

The page holds the per-bucket table (first measurement against the last), charts of bucket
scores over the iterations and over the nights (matplotlib, inlined as SVG), the cost of each
iteration and per accepted patch (from the ledger), every proposal with its diff and the gate's
reason per rule, and the worst failures of the last baseline with their graders' rationales. No
script, font or image is fetched: the file can be mailed or attached to a CI run.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2

from optimizer.errors import InputError
from optimizer.history import costs_by, spec_lines
from optimizer.store import Store

TEMPLATES = Path(__file__).parent / "templates"
WORST_FAILURES = 10


@dataclass
class Point:
    label: str
    run_id: str
    buckets: dict[str, float]


BUCKET_DEFAULTS = {"pairs": None, "verdict": None, "mde": None, "kind": "bucket", "ci_low": None, "ci_high": None,
                   "p_improve_holm": None}
"""Fields a decision stored by an older version lacks: shown as –."""

def _bucket_means(store: Store, run_id: str | None) -> dict[str, float]:
    record = store.run_record(run_id) if run_id else None
    summary = (record or {}).get("summary") or {}
    return {f"{row['suite']}/{row['bucket']}": row["mean_score"] for row in summary.get("buckets") or []
            if row.get("mean_score") is not None}


def _iteration_rows(store: Store, iteration_ids: list[str], costs) -> list[dict[str, Any]]:
    """`costs`: `history.costs_by(ledger, "iteration_id")` indexed by iteration id."""
    rows = []
    for number, iteration_id in enumerate(iteration_ids, start=1):
        record = store.iteration(iteration_id)
        if record is None:
            continue
        proposals = store.proposals(iteration_id=iteration_id)
        cost = costs.loc[iteration_id] if iteration_id in costs.index else None
        rows.append({
            "number": number, "iteration_id": iteration_id, "status": record["status"],
            "agent": record.get("agent") or "", "targets": record.get("targets") or [],
            "baseline_run_id": record.get("baseline_run_id"),
            "cost_usd": float(cost["cost_usd"]) if cost is not None else 0.0,
            "tokens": int(cost["tokens"]) if cost is not None else 0,
            "proposals": [{
                "branch": p["branch"], "status": p["status"], "reason": p["reason"], "rationale": p["rationale"],
                "diff": p["diff"] or "", "candidate_run_id": p.get("candidate_run_id"),
                "rules": (p.get("decision") or {}).get("rules") or [],
                "buckets": [{**BUCKET_DEFAULTS, **row} for row in (p.get("decision") or {}).get("buckets") or []],
                "non_voting": (p.get("decision") or {}).get("non_voting") or []} for p in proposals],
        })
    return rows


def _chart(series: list[Point], title: str, highlight: set[str]) -> str:
    """Bucket scores as lines over the points, as inline SVG ('' with fewer than one point)."""
    if not series:
        return ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = sorted({bucket for point in series for bucket in point.buckets})
    figure, axis = plt.subplots(figsize=(9.5, 4.2), dpi=100)
    xs = list(range(len(series)))
    for bucket in buckets:
        ys = [point.buckets.get(bucket) for point in series]
        marked = bucket in highlight
        axis.plot([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None],
                  marker="o", linewidth=2.4 if marked else 1.0, alpha=1.0 if marked else 0.45,
                  label=bucket.split("/", 1)[-1] + (" *" if marked else ""))
    axis.set_xticks(xs, [point.label for point in series], rotation=20, ha="right", fontsize=8)
    axis.set_ylim(-0.02, 1.02)
    axis.set_ylabel("mean task score")
    axis.set_title(title, fontsize=11)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _worst_failures(store: Store, run_id: str | None) -> list[dict[str, Any]]:
    if not run_id:
        return []
    trials = [t for t in store.load_trials(run_id) if t.status == "failed"]
    trials.sort(key=lambda t: (t.score if t.score is not None else 0.0, t.task_id, t.index))
    rows, seen = [], set()
    for trial in trials:
        if (trial.suite, trial.task_id) in seen:
            continue
        seen.add((trial.suite, trial.task_id))
        rows.append({"suite": trial.suite, "task_id": trial.task_id, "bucket": trial.bucket, "split": trial.split,
                     "trial": trial.index, "score": trial.score, "ending": trial.error or "",
                     "graders": [{"grader": r.grader, "score": r.score, "rationale": r.rationale}
                                 for r in trial.grader_results if not r.passed]})
        if len(rows) == WORST_FAILURES:
            break
    return rows


def build(store: Store, target: str | None = None) -> dict[str, Any]:
    """The page's data for a nightly id or an iteration id (default: the latest night, else the
    latest iteration)."""
    nightlies = store.nightlies()
    night = next((n for n in nightlies if n["nightly_id"] == target), None) if target else \
        (nightlies[-1] if nightlies else None)
    if night is not None:
        state = night.get("state") or {}
        iteration_ids = [row["iteration_id"] for row in state.get("iterations") or [] if row.get("iteration_id")]
        title = f"Nightly {night['nightly_id']} on {night['branch']}"
        header = {"kind": "nightly", "id": night["nightly_id"], "branch": night["branch"], "status": night["status"],
                  "base": f"{night['base_ref']} @ {night['base_commit'][:12]}", "tip": night["tip_commit"][:12],
                  "stop_reason": state.get("stop_reason", ""), "spent_usd": state.get("spent_usd", 0.0),
                  "spent_tokens": state.get("spent_tokens", 0), "accepted": state.get("accepted", 0)}
    else:
        iterations = store.iterations()
        chosen = next((i for i in iterations if i["iteration_id"] == target), None) if target else \
            (iterations[-1] if iterations else None)
        if chosen is None:
            raise InputError(f"no nightly job or iteration {target!r} in the store" if target else
                             "the store has no nightly job or iteration yet", field="RUN_ID",
                             fix="run `optimizer run` or `optimizer nightly` first; `optimizer history` lists ids")
        iteration_ids = [chosen["iteration_id"]]
        title = f"Iteration {chosen['iteration_id']}"
        header = {"kind": "iteration", "id": chosen["iteration_id"], "branch": "", "status": chosen["status"],
                  "base": f"{chosen.get('base_ref')} @ {chosen['base_commit'][:12]}", "tip": "",
                  "stop_reason": "", "spent_usd": None, "spent_tokens": None,
                  "accepted": int(chosen["status"] == "accepted")}
    costs = costs_by(store.ledger_frame(), "iteration_id").set_index("iteration_id")
    iterations = _iteration_rows(store, iteration_ids, costs)
    specs = spec_lines(store.runs_frame())
    for row in iterations:
        row.update(specs.get(row["baseline_run_id"]) or {"spec": None, "spec_changes": None})
    points = []
    for row in iterations:
        if row["baseline_run_id"]:
            points.append(Point(f"#{row['number']} start", row["baseline_run_id"],
                                _bucket_means(store, row["baseline_run_id"])))
    accepted_runs = [p["candidate_run_id"] for row in iterations for p in row["proposals"]
                     if p["status"] == "accepted" and p["candidate_run_id"]]
    if accepted_runs:
        points.append(Point("end", accepted_runs[-1], _bucket_means(store, accepted_runs[-1])))
    first = points[0].buckets if points else {}
    last = points[-1].buckets if points else {}
    targeted = {target for row in iterations for target in row["targets"]}
    table = [{"bucket": bucket, "start": first.get(bucket), "end": last.get(bucket),
              "change": (last[bucket] - first[bucket]) if bucket in first and bucket in last else None,
              "targeted": bucket in targeted} for bucket in sorted(set(first) | set(last))]
    night_points = []
    for other in nightlies:
        ids = [row["iteration_id"] for row in (other.get("state") or {}).get("iterations") or []
               if row.get("iteration_id")]
        rows = _iteration_rows(store, ids[-1:], costs) if ids else []
        runs = [p["candidate_run_id"] for r in rows for p in r["proposals"] if p["status"] == "accepted"] or \
               [r["baseline_run_id"] for r in rows if r["baseline_run_id"]]
        if runs:
            night_points.append(Point(str(other["started_at"])[:10] + " " + other["nightly_id"][-6:], runs[-1],
                                      _bucket_means(store, runs[-1])))
    accepted = sum(1 for row in iterations for p in row["proposals"] if p["status"] == "accepted")
    total_cost = sum(row["cost_usd"] for row in iterations)
    last_baseline = next((row["baseline_run_id"] for row in reversed(iterations) if row["baseline_run_id"]), None)
    last_run = store.run_record(points[-1].run_id) if points else None
    judges = ((last_run or {}).get("summary") or {}).get("judges") or []
    return {"title": title, "header": header, "iterations": iterations, "table": table, "judges": judges,
            "chart_iterations": _chart(points, "Bucket scores over the iterations (* targeted)", targeted),
            "chart_nights": _chart(night_points, "Bucket scores at the end of each night", targeted),
            "cost_total": total_cost, "accepted": accepted,
            "cost_per_accepted": total_cost / accepted if accepted else None,
            "failures": _worst_failures(store, last_baseline), "failures_run": last_baseline,
            "generated": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def render(data: dict[str, Any]) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                     undefined=jinja2.StrictUndefined)
    def number(form: str):
        return lambda v: form.format(v) if isinstance(v, (int, float)) and v == v else "–"

    environment.filters["score"] = number("{:.2f}")
    environment.filters["signed"] = number("{:+.2f}")
    environment.filters["usd"] = number("${:,.4f}")
    return environment.get_template("report.html.j2").render(**data)
