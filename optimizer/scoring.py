"""From grader results to trial verdicts, and from trials to task, bucket and suite figures.

Trial score = mean of its applicable graders' scores; the trial passes iff every applicable
grader passed; a trial with an errored grader is errored. Task score = mean score of its scored
(non-errored) trials; pass@k = some trial passed; pass^k = every scored trial passed. Bucket and
suite figures are means over tasks, with a 95% t-interval over task scores. Errored trials are
counted, never scored. A trial the agent cut short (its turn limit, or its deadline passing while
the model kept answering) is not graded: the runner records it failed with score 0.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Iterable

from optimizer.types import GraderResult, Trial, TrialStatus

if TYPE_CHECKING:  # pandas is imported where a table is built: verdicts and intervals need none of it
    import pandas as pd

INFRASTRUCTURE_ENDING = "infrastructure: "
"""How the `error` of a trial the machine or the model server spoiled begins (its time ran out
while the model was far slower than normal, or answered nothing): errored, not the agent's doing."""


def spoiled(trial: Trial) -> bool:
    """Whether the infrastructure, not the agent or the prompt, spoiled `trial` (see `INFRASTRUCTURE_ENDING`)."""
    return trial.status == "errored" and (trial.error or "").startswith(INFRASTRUCTURE_ENDING)


def graded_score(results: Iterable[GraderResult], leave_out: frozenset[str] = frozenset()) -> float | None:
    """A trial's score: the mean of its applicable graders' scores, less the graders in
    `leave_out` (judges that do not vote); None when no grader is left. The one place a score is
    computed: the runner records it, the gate recomputes it only when it leaves graders out."""
    scores = [result.score for result in results if result.applicable and result.grader not in leave_out]
    return sum(scores) / len(scores) if scores else None


def trial_verdict(results: list[GraderResult]) -> tuple[TrialStatus, float | None]:
    """The trial's status and score from its graders' results (see the module docstring)."""
    if any(result.errored for result in results):
        return "errored", None
    score = graded_score(results)
    if score is None:
        return "passed", None
    return ("passed" if all(result.passed for result in results if result.applicable) else "failed"), score


def trials_frame(trials: Iterable[Trial]) -> pd.DataFrame:
    import pandas as pd

    rows = [{"suite": t.suite, "task_id": t.task_id, "bucket": t.bucket, "split": t.split,
             "trial_index": t.index, "status": t.status, "score": t.score,
             "tokens": t.transcript.usage.total_tokens, "cost_usd": t.transcript.usage.cost_usd,
             "model_calls": t.transcript.usage.calls, "cache_hits": t.transcript.usage.cache_hits}
            for t in trials]
    columns = ["suite", "task_id", "bucket", "split", "trial_index", "status", "score", "tokens", "cost_usd",
               "model_calls", "cache_hits"]
    return pd.DataFrame(rows, columns=columns)


def task_figures(trials: Iterable[Trial]) -> list[dict[str, Any]]:
    """One row per (suite, task), in the order the tasks first appear: its trials, errored,
    scored and passing trials, mean score over scored trials (NaN when none), tokens, cost,
    pass@k and pass^k (NaN when no trial was scored). Plain Python: a run is summarized after
    every stage of an iteration, where a table library's per-call cost outweighed the arithmetic."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    scores: dict[tuple[str, str], list[float]] = {}
    for trial in trials:
        key = (trial.suite, trial.task_id)
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"suite": trial.suite, "task_id": trial.task_id, "bucket": trial.bucket,
                               "split": trial.split, "trials": 0, "errored": 0, "scored": 0, "passes": 0,
                               "score": math.nan, "tokens": 0, "cost_usd": 0.0}
            scores[key] = []
        row["trials"] += 1
        row["errored"] += trial.status == "errored"
        row["scored"] += trial.status != "errored"
        row["passes"] += trial.status == "passed"
        if trial.score is not None and not math.isnan(trial.score):
            scores[key].append(trial.score)
        row["tokens"] += trial.transcript.usage.total_tokens
        row["cost_usd"] += trial.transcript.usage.cost_usd
    for key, row in rows.items():
        values = scores[key]
        row["score"] = sum(values) / len(values) if values else math.nan
        row["pass_at_k"] = float(row["passes"] > 0) if row["scored"] else math.nan
        row["pass_pow_k"] = float(row["passes"] == row["scored"]) if row["scored"] else math.nan
    return list(rows.values())


def group_figures(tasks: list[dict[str, Any]], by: list[str]) -> list[dict[str, Any]]:
    """Figures per group of task rows (e.g. by suite, or by suite and bucket), groups in sorted
    order: tasks, trials, mean pass@k and pass^k, mean task score with its 95% t-interval,
    errored trials, tokens, cost."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for task in tasks:
        groups.setdefault(tuple(task[name] for name in by), []).append(task)
    rows = []
    for key in sorted(groups):
        group = groups[key]
        low, mean, high = mean_interval(_present(task["score"] for task in group))
        rows.append({**dict(zip(by, key)), "tasks": len(group), "trials": sum(task["trials"] for task in group),
                     "pass_at_k": _mean(task["pass_at_k"] for task in group),
                     "pass_pow_k": _mean(task["pass_pow_k"] for task in group),
                     "mean_score": mean, "ci_low": low, "ci_high": high,
                     "errored": sum(task["errored"] for task in group),
                     "tokens": sum(task["tokens"] for task in group),
                     "cost_usd": float(sum(task["cost_usd"] for task in group))})
    return rows


def trial_value(score: float | None, status: str) -> float:
    """What a trial counts for in a mean: its score, or 1/0 by its verdict when it has none."""
    if score is not None and not (isinstance(score, float) and math.isnan(score)):
        return float(score)
    return 1.0 if status == "passed" else 0.0


def voting_passed(trial: Trial, non_voting: frozenset[str] = frozenset()) -> bool:
    """Whether `trial` passed by its voting graders: `trial_verdict` over its results, the graders
    in `non_voting` left out (its recorded status when none of them applied). An errored trial
    did not pass. What the gate's pass/fail bets read, as `voting_value` is what its score bets read."""
    if trial.status == "errored":
        return False
    if not any(result.applicable and result.grader in non_voting for result in trial.grader_results):
        return trial.status == "passed"
    voting = [result for result in trial.grader_results if result.grader not in non_voting]
    return trial_verdict(voting)[0] == "passed"


def voting_value(trial: Trial, non_voting: frozenset[str] = frozenset()) -> float | None:
    """What a trial counts for in a comparison: its score (1/0 by its verdict without one), the
    score of its voting graders alone when some applicable grader is `non_voting`, or None when
    it errored or only non-voting graders scored it."""
    if trial.status == "errored":
        return None
    if any(result.applicable and result.grader in non_voting for result in trial.grader_results):
        return graded_score(trial.grader_results, non_voting)
    return trial_value(trial.score, trial.status)


def mean_interval(values: list[float], confidence: float = 0.95, *,
                  bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float, float]:
    """Mean with a t-interval, clipped to what the values can be: [0, 1] for scores, [-1, 1] for
    changes of a score (with a handful of tasks the t-interval alone runs past both); NaN bounds
    when fewer than two values."""
    if not values:
        return math.nan, math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return math.nan, mean, math.nan
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    half = _t_quantile(0.5 + confidence / 2, len(values) - 1) * math.sqrt(variance / len(values))
    low, high = bounds
    return max(low, mean - half), mean, min(high, mean + half)


@functools.lru_cache(maxsize=1024)
def _t_quantile(probability: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(probability, df))


def _present(values: Iterable[float]) -> list[float]:
    return [value for value in values if not math.isnan(value)]


def _mean(values: Iterable[float]) -> float:
    present = _present(values)
    return sum(present) / len(present) if present else math.nan
