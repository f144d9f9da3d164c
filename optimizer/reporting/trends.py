"""Trends over nights: pass rate per bucket and per split at every baseline in the store, on a
time axis with the accepted patches marked, for the HTML report and the viewer.

A baseline measures the branch's tip at fixed trial indexes at the start of an iteration, so
successive baselines compare like for like; candidate and confirm runs measure other prompts or
fresh indexes and are left out. The pass rate leaves errored trials out, as the scores do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, func, select

from optimizer.store import schema

BOX = {"width": 260, "height": 100, "left": 26, "right": 8, "top": 6, "bottom": 18}
"""One small chart in SVG units; pass rates 0..1 upwards, time to the right."""
MAX_POINTS = 500
"""The latest baselines charted; older ones are left off so a long history stays one query."""


def _points(engine: Engine) -> list[dict[str, Any]]:
    """Every baseline an iteration started from, oldest first: run id and start time."""
    i, r = schema.iterations, schema.runs
    statement = (select(r.c.run_id, r.c.started_at).join(i, i.c.baseline_run_id == r.c.run_id)
                 .group_by(r.c.run_id, r.c.started_at).order_by(r.c.started_at.desc()).limit(MAX_POINTS))
    with engine.connect() as conn:
        return [dict(row) for row in reversed(conn.execute(statement).mappings().all())]


def _rates(engine: Engine, run_ids: list[str]) -> dict[str, dict[str, float]]:
    """Per run, the pass rate of each `suite/bucket` and `suite split <name>`."""
    t = schema.trials
    passed = func.sum(case((t.c.status == "passed", 1), else_=0))
    graded = func.sum(case((t.c.status != "errored", 1), else_=0))
    statement = (select(t.c.run_id, t.c.suite, t.c.bucket, t.c.split, passed.label("passed"), graded.label("graded"))
                 .where(t.c.run_id.in_(run_ids)).group_by(t.c.run_id, t.c.suite, t.c.bucket, t.c.split))
    sums: dict[str, dict[str, list[int]]] = {}
    with engine.connect() as conn:
        for row in conn.execute(statement).mappings():
            for series in (f"{row['suite']}/{row['bucket']}", f"{row['suite']} split {row['split']}"):
                total = sums.setdefault(row["run_id"], {}).setdefault(series, [0, 0])
                total[0] += row["passed"] or 0
                total[1] += row["graded"] or 0
    return {run: {series: p / n for series, (p, n) in by.items() if n} for run, by in sums.items()}


def _accepted(engine: Engine) -> list[dict[str, Any]]:
    p = schema.proposals
    statement = (select(p.c.iteration_id, p.c.branch, p.c.created_at).where(p.c.status == "accepted")
                 .order_by(p.c.created_at))
    with engine.connect() as conn:
        return [dict(row) for row in conn.execute(statement).mappings().all()]


def trends(engine: Engine) -> dict[str, Any]:
    """Chart coordinates (the template draws them): one small chart per bucket and per split,
    splits first, each with the same time axis and the accepted patches as vertical marks.
    Empty when no iteration has a baseline."""
    points = _points(engine)
    if not points:
        return {}
    rates = _rates(engine, [p["run_id"] for p in points])
    patches = _accepted(engine)
    stamps = [p["started_at"] for p in points] + [a["created_at"] for a in patches]
    start, end = min(stamps), max(stamps)
    width, height, left, right, top, bottom = (BOX[k] for k in ("width", "height", "left", "right", "top", "bottom"))
    span = (end - start).total_seconds() or 1.0

    def x(moment: datetime) -> float:
        if end == start:
            return round((left + width - right) / 2, 1)
        return round(left + (moment - start).total_seconds() / span * (width - left - right), 1)

    def y(value: float) -> float:
        return round(top + (1 - value) * (height - top - bottom), 1)

    names = sorted({s for by in rates.values() for s in by}, key=lambda s: (" split " not in s, s))
    charts = []
    for name in names:
        present = [(p, rates[p["run_id"]][name]) for p in points if name in rates.get(p["run_id"], {})]
        charts.append({"name": name, "first": present[0][1], "last": present[-1][1],
                       "path": " ".join(f"{x(p['started_at'])},{y(v)}" for p, v in present),
                       "points": [{"x": x(p["started_at"]), "y": y(v), "value": v, "run_id": p["run_id"],
                                   "at": str(p["started_at"])[:16]} for p, v in present]})
    return {"box": BOX, "charts": charts, "baselines": len(points),
            "patches": [{"x": x(a["created_at"]), "label": f"{a['branch']} accepted {str(a['created_at'])[:16]}"}
                        for a in patches],
            "grid": [{"y": y(v), "label": f"{v:.1f}"} for v in (0.0, 0.5, 1.0)],
            "ticks": [{"x": x(start), "label": f"{str(start)[:16]} UTC", "anchor": "start"},
                      {"x": x(end), "label": f"{str(end)[:16]} UTC", "anchor": "end"}]}
