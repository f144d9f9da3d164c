"""Summaries of a run: per suite, per bucket and per task, as data (for --json) and as tables."""

from __future__ import annotations

import math
from typing import Any

from optimizer.scoring import group_figures, task_figures
from optimizer.types import RunResult


def summarize(run: RunResult) -> dict[str, Any]:
    """Everything a report shows, JSON-ready (NaN becomes None)."""
    tasks = task_figures(run.trials)
    usage = run.usage
    return {
        "run_id": run.run_id,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "settings": run.settings,
        "fingerprints": run.fingerprints,
        "totals": {"trials": len(run.trials), "errored": sum(t.status == "errored" for t in run.trials),
                   "passed": sum(t.status == "passed" for t in run.trials),
                   "model_calls": usage.calls, "cache_hits": usage.cache_hits,
                   "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                   "cost_usd": usage.cost_usd},
        "suites": _records(group_figures(tasks, ["suite"])),
        "splits": _records(group_figures(tasks, ["suite", "split"])),
        "buckets": _records(group_figures(tasks, ["suite", "bucket"])),
        "tasks": _records(tasks),
        "errors": [{"suite": t.suite, "task_id": t.task_id, "trial": t.index, "error": t.error}
                   for t in run.trials if t.status == "errored"],
        "unfinished": [{"suite": t.suite, "task_id": t.task_id, "trial": t.index, "error": t.error}
                       for t in run.trials if t.status == "failed" and t.error],
    }


def _records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: _clean(value) for key, value in row.items()} for row in rows]


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and math.isnan(value) else value
