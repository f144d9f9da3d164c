"""`optimizer report --html`: one self-contained HTML page about a night or an iteration.

The page holds the per-bucket table (first measurement against the last), bucket scores over
the iterations and over the nights as small multiples (a small inline SVG chart per bucket that
moved or was targeted, drawn by the template), the cost of each
iteration and per accepted patch (from the ledger), every proposal with its diff and the gate's
reason per rule, and the worst failures of the last baseline with their graders' rationales. No
script, font or image is fetched: the file can be mailed or attached to a CI run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2

from optimizer.reporting.decision_view import COLUMNS, decision_view
from optimizer.errors import InputError
from optimizer.reporting.history import costs_by, spec_lines
from optimizer.store import Store
from optimizer.reporting.trends import trends

TEMPLATES = Path(__file__).parent.parent / "templates"
WORST_FAILURES = 10


@dataclass
class Point:
    label: str
    run_id: str
    buckets: dict[str, float]
    tick: str = ""
    """The label under a small chart's axis (`#2`, `end`, `11-23`)."""


def _bucket_means(store: Store, run_id: str | None) -> dict[str, float]:
    record = store.runs.get(run_id) if run_id else None
    summary = (record or {}).get("summary") or {}
    return {f"{row['suite']}/{row['bucket']}": row["mean_score"] for row in summary.get("buckets") or []
            if row.get("mean_score") is not None}


def _iteration_rows(store: Store, iteration_ids: list[str], costs: dict[str, dict]) -> list[dict[str, Any]]:
    """`costs`: `history.costs_by(store, "iteration_id")`."""
    rows = []
    for number, iteration_id in enumerate(iteration_ids, start=1):
        record = store.iterations.get(iteration_id)
        if record is None:
            continue
        proposals = store.proposals.rows(iteration_id=iteration_id)
        cost = costs.get(iteration_id)
        rows.append({
            "number": number, "iteration_id": iteration_id, "status": record["status"],
            "agent": record.get("agent") or "", "targets": record.get("targets") or [],
            "baseline_run_id": record.get("baseline_run_id"),
            "cost_usd": float(cost["cost_usd"]) if cost is not None else 0.0,
            "tokens": int(cost["tokens"]) if cost is not None else 0,
            "proposals": [{
                "branch": p["branch"], "status": p["status"], "reason": p["reason"], "rationale": p["rationale"],
                "diff": p["diff"] or "", "candidate_run_id": p.get("candidate_run_id"),
                "buckets": (p.get("decision") or {}).get("buckets") or [],
                "decision": decision_view(p["decision"]) if p.get("decision") else None} for p in proposals],
        })
    return rows


CHART = {"width": 200, "height": 92, "left": 24, "right": 8, "top": 6, "bottom": 16}
"""A small chart's box in SVG units: the plot area is inside the margins, scores 0..1 upwards."""
MOVED = 0.005
"""A bucket whose scores differ by less than this at every point shows the same to 2 decimals:
it gets no chart of its own, only a mention."""


def _multiples(series: list[Point], targeted: set[str]) -> dict[str, Any]:
    """Bucket scores over the points as small multiples: one chart per targeted bucket or bucket
    whose score moved (targeted first), the same axes in each so they compare at a glance, and
    the unchanged buckets listed with their score. Coordinates only; the template draws."""
    width, height, left, right, top, bottom = (CHART[k] for k in ("width", "height", "left", "right", "top",
                                                                 "bottom"))
    step = (width - left - right) / max(len(series) - 1, 1)
    xs = [left + i * step if len(series) > 1 else (left + width - right) / 2 for i in range(len(series))]

    def y(value: float) -> float:
        return round(top + (1 - value) * (height - top - bottom), 1)

    charts, unchanged = [], []
    for bucket in sorted({b for point in series for b in point.buckets}, key=lambda b: (b not in targeted, b)):
        values = [(x, point, point.buckets.get(bucket)) for x, point in zip(xs, series)]
        present = [(x, point, value) for x, point, value in values if value is not None]
        if bucket not in targeted and max(v for *_, v in present) - min(v for *_, v in present) < MOVED:
            unchanged.append({"bucket": bucket, "score": present[0][2]})
            continue
        charts.append({"bucket": bucket, "name": bucket.split("/", 1)[-1], "targeted": bucket in targeted,
                       "first": present[0][2], "last": present[-1][2],
                       "path": " ".join(f"{x:.1f},{y(value)}" for x, _, value in present),
                       "points": [{"x": round(x, 1), "y": y(value), "value": value, "label": point.label}
                                  for x, point, value in present]})
    return {"box": CHART, "charts": charts, "unchanged": unchanged,
            "grid": [{"y": y(value), "label": f"{value:.1f}"} for value in (0.0, 0.5, 1.0)],
            "ticks": [{"x": round(x, 1), "label": point.tick or str(i + 1)} for i, (x, point) in
                      enumerate(zip(xs, series))],
            "labels": [point.label for point in series]} if series else {}


def _end(store: Store, iterations: list[dict[str, Any]]) -> tuple[Point | None, dict[str, dict]]:
    """What ends the night after its first baseline: the chart's extra last point (None when a
    baseline ends it) and, per bucket, a gate's row that stands in for the runs' means.

    The start is the first baseline's own trials. The baseline of an iteration after the last
    accepted patch measured the branch's tip on those same trial indexes, so it is the end, like
    for like. A night that ended on an accepted patch has no such baseline: its candidate's run
    is the tip. That run holds the other buckets at the baseline's trial indexes, but the targeted
    buckets' train tasks only at fresh indexes, paired with fresh trials of the base prompt;
    against the baseline's own trials that compares two samples (a patch the gate measured
    0.25 -> 0.50 on `trivial_input` showed 0.50 -> 0.50). Those buckets take the gate's paired
    means instead."""
    accepted = [(row, proposal) for row in iterations for proposal in row["proposals"]
                if proposal["status"] == "accepted" and proposal["candidate_run_id"]]
    if not accepted:
        return None, {}
    row, proposal = accepted[-1]
    if any(later["baseline_run_id"] for later in iterations if later["number"] > row["number"]):
        return None, {}
    run_id = proposal["candidate_run_id"]
    gate = {f"{b['suite']}/{b['bucket']}": b for b in proposal["buckets"]
            if b.get("targeted") and b.get("before") is not None and b.get("after") is not None}
    return Point(f"end: #{row['number']}'s accepted candidate", run_id, _bucket_means(store, run_id), "end"), gate


def _bucket_table(first: dict[str, float], last: dict[str, float], targeted: set[str], gate: dict[str, dict],
                  iterations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per bucket: start, end and change (`paired`: the gate's means stand in, see `_end`), and
    `accepted`: what the gate measured for each accepted patch that targeted it (change, pairs,
    iteration number). A baseline holds few trials per task (4 by default) at fixed indexes, so a
    patch the gate showed to help on many fresh pairs can leave those few where they were."""
    accepted: dict[str, list[dict[str, Any]]] = {}
    for row in iterations:
        for proposal in row["proposals"]:
            if proposal["status"] == "accepted":
                for b in proposal["buckets"]:
                    if b.get("change") is not None and b.get("suite"):
                        accepted.setdefault(f"{b['suite']}/{b['bucket']}", []).append(
                            {"number": row["number"], "change": b["change"], "pairs": b.get("pairs"),
                             "verdict": b.get("verdict") or ""})
    rows = []
    for bucket in sorted(set(first) | set(last) | set(gate)):
        start, end = (gate[bucket]["before"], gate[bucket]["after"]) if bucket in gate else \
            (first.get(bucket), last.get(bucket))
        rows.append({"bucket": bucket, "start": start, "end": end, "targeted": bucket in targeted,
                     "paired": bucket in gate, "accepted": accepted.get(bucket, []),
                     "change": end - start if start is not None and end is not None else None})
    return rows


def _worst_failures(store: Store, run_id: str | None) -> list[dict[str, Any]]:
    if not run_id:
        return []
    trials = [t for t in store.trials.load(run_id) if t.status == "failed"]
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
    nightlies = store.nightlies.rows()
    title, header, iteration_ids = _subject(store, nightlies, target)
    costs = costs_by(store, "iteration_id")
    iterations = _iteration_rows(store, iteration_ids, costs)
    specs = spec_lines(store.runs.rows("run_id", "kind", "fingerprints_json"))
    for row in iterations:
        row.update(specs.get(row["baseline_run_id"]) or {"spec": None, "spec_changes": None})
    points = []
    for row in iterations:
        if row["baseline_run_id"]:
            points.append(Point(f"#{row['number']} start", row["baseline_run_id"],
                                _bucket_means(store, row["baseline_run_id"]), f"#{row['number']}"))
    end, gate = _end(store, iterations)
    if end is not None:
        points.append(end)
    targeted = {target for row in iterations for target in row["targets"]}
    table = _bucket_table(points[0].buckets if points else {}, points[-1].buckets if points else {}, targeted, gate,
                          iterations)
    night_points = _night_points(store, nightlies, costs)
    accepted = sum(1 for row in iterations for p in row["proposals"] if p["status"] == "accepted")
    total_cost = sum(row["cost_usd"] for row in iterations)
    last_baseline = next((row["baseline_run_id"] for row in reversed(iterations) if row["baseline_run_id"]), None)
    last_run = store.runs.get(points[-1].run_id) if points else None
    judges = ((last_run or {}).get("summary") or {}).get("judges") or []
    return {"title": title, "header": header, "iterations": iterations, "table": table, "judges": judges,
            "chart_iterations": _multiples(points, targeted), "chart_nights": _multiples(night_points, targeted),
            "cost_total": total_cost, "accepted": accepted,
            "cost_per_accepted": total_cost / accepted if accepted else None,
            "failures": _worst_failures(store, last_baseline), "failures_run": last_baseline,
            "trends": _trends(store),
            "generated": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def _subject(store: Store, nightlies: list[dict[str, Any]], target: str | None
             ) -> tuple[str, dict[str, Any], list[str]]:
    """The page's title, header and iteration ids: the night `target` names (default the latest),
    else the iteration it names (default the latest, when the store has no night)."""
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
        iterations = store.iterations.rows()
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
    return title, header, iteration_ids


def _night_points(store: Store, nightlies: list[dict[str, Any]], costs: dict[str, dict]) -> list[Point]:
    """One point per night for the chart across nights: the bucket means of its last iteration's
    accepted candidate, else of that iteration's baseline."""
    night_points = []
    for other in nightlies:
        ids = [row["iteration_id"] for row in (other.get("state") or {}).get("iterations") or []
               if row.get("iteration_id")]
        rows = _iteration_rows(store, ids[-1:], costs) if ids else []
        runs = [p["candidate_run_id"] for r in rows for p in r["proposals"] if p["status"] == "accepted"] or \
               [r["baseline_run_id"] for r in rows if r["baseline_run_id"]]
        if runs:
            night_points.append(Point(str(other["started_at"])[:10] + " " + other["nightly_id"][-6:], runs[-1],
                                      _bucket_means(store, runs[-1]), str(other["started_at"])[5:10]))
    return night_points


def _trends(store: Store) -> dict[str, Any]:
    store.flush()
    return trends(store.engine)


def render(data: dict[str, Any]) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                     undefined=jinja2.StrictUndefined)
    def number(form: str):
        return lambda v: form.format(v) if isinstance(v, (int, float)) and v == v else "–"

    environment.filters["score"] = number("{:.2f}")
    environment.filters["signed"] = number("{:+.2f}")
    environment.filters["usd"] = number("${:,.4f}")
    return environment.get_template("report.html.j2").render(columns=COLUMNS, **data)
