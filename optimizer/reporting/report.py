"""Summaries of a run: per suite, per bucket and per task, as data (for --json) and as tables."""

from __future__ import annotations

import math
from typing import Any

from optimizer.scoring import group_table, task_table, trials_frame
from optimizer.types import RunResult


def summarize(run: RunResult) -> dict[str, Any]:
    """Everything a report shows, JSON-ready (NaN becomes None)."""
    trials = trials_frame(run.trials)
    tasks = task_table(trials)
    usage = run.usage
    return {
        "run_id": run.run_id,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "settings": run.settings,
        "fingerprints": run.fingerprints,
        "totals": {"trials": len(run.trials), "errored": int((trials["status"] == "errored").sum()),
                   "passed": int((trials["status"] == "passed").sum()),
                   "model_calls": usage.calls, "cache_hits": usage.cache_hits,
                   "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                   "cost_usd": usage.cost_usd},
        "suites": _records(group_table(tasks, ["suite"])),
        "splits": _records(group_table(tasks, ["suite", "split"])),
        "buckets": _records(group_table(tasks, ["suite", "bucket"])),
        "tasks": _records(tasks),
        "errors": [{"suite": t.suite, "task_id": t.task_id, "trial": t.index, "error": t.error}
                   for t in run.trials if t.status == "errored"],
        "unfinished": [{"suite": t.suite, "task_id": t.task_id, "trial": t.index, "error": t.error}
                       for t in run.trials if t.status == "failed" and t.error],
    }


def _records(frame) -> list[dict[str, Any]]:
    records = frame.to_dict(orient="records")
    return [{key: _clean(value) for key, value in row.items()} for row in records]


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
