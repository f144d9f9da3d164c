"""Pieces shared by the commands: settings from flags, progress, tables."""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(stderr=False, width=None if sys.stdout.isatty() else 150)
err_console = Console(stderr=True)


def project_settings(**flags):
    """The project folder (`find_project_root`) and its settings, with the flags given on the
    command line over the settings file and the environment (`load_settings`): every command that
    reads settings starts here."""
    from optimizer.settings.loading import load_settings
    from optimizer.settings.sources import find_project_root

    root = find_project_root()
    return root, load_settings(root, flags)


def loop_context(settings, root, *, quiet: bool = False):
    """A loop's context for a command: the store, and the log and progress on stderr."""
    from optimizer.loop.iteration import LoopContext
    from optimizer.store import open_store

    store = open_store(settings, root)
    return LoopContext(settings=settings.parts, project_root=root, store=store,
                       log=(lambda message: None) if quiet else
                       (lambda message: err_console.print(message, highlight=False, markup=False, soft_wrap=True)),
                       make_progress=lambda total, label: TrialProgress(total, label))


def recording(settings, store):
    """Charge every model call of a command to the cost ledger (no budget: budgets are the
    nightly job's)."""
    from optimizer.ledger import Ledger, charging

    return charging(Ledger(store, prices=dict(settings.model_prices)))


def interactive() -> bool:
    """Live progress bars on a terminal; plain lines under CI, cron (no terminal) or OPTIMIZER_PLAIN."""
    return sys.stderr.isatty() and not os.environ.get("CI") and not os.environ.get("OPTIMIZER_PLAIN")


PLAIN_LINE_EVERY_S = 5.0
"""Without a terminal, a progress line at each tenth of the trials, at most one per this many seconds."""


class TrialProgress:
    """done/total, pass rate, tokens, cost and ETA while trials finish."""

    def __init__(self, total: int, label: str = "trials"):
        self.total, self.label = total, label
        self.done = self.passed = self.scored = self.errored = self.tokens = 0
        self.cost = 0.0
        self.started = self.last_line = time.monotonic()
        self.first_done: float | None = None
        """When the first trial finished: the ETA is paced from there, since the time before it
        holds one-off start-up (importing litellm takes seconds) that later trials do not repeat."""
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)  # here: a command without trials (history) skips it

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta"),
                                 TimeRemainingColumn(), console=err_console, disable=not interactive())
        self.task_id = self.progress.add_task(label, total=total, stats="")

    def __enter__(self) -> "TrialProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, trial) -> None:
        self.done += 1
        if self.first_done is None:
            self.first_done = time.monotonic()
        usage = trial.transcript.usage
        self.tokens += usage.total_tokens
        self.cost += usage.cost_usd
        if trial.status == "errored":
            self.errored += 1
        else:
            self.scored += 1
            self.passed += trial.status == "passed"
        rate = f"{self.passed / self.scored:.0%}" if self.scored else "-"
        stats = f"pass {rate}  errored {self.errored}  tokens {self.tokens:,}  ${self.cost:.4f}"
        self.progress.update(self.task_id, advance=1, stats=stats)
        now = time.monotonic()
        step_done = self.done % max(1, self.total // 10) == 0 and now - self.last_line >= PLAIN_LINE_EVERY_S
        if not interactive() and (step_done or self.done == self.total):
            self.last_line = now
            elapsed = now - self.started
            eta = self.eta(now)
            err_console.print(f"{self.label}: {self.done}/{self.total} trials  {stats}  elapsed {_clock(elapsed)}  "
                              f"eta {_clock(eta) if eta is not None else '-'}", highlight=False, soft_wrap=True)

    def eta(self, now: float) -> float | None:
        """Seconds left at the pace since the first trial finished; None before that pace exists."""
        if self.done >= self.total:
            return 0.0
        if self.first_done is None or self.done < 2:
            return None
        return (now - self.first_done) / (self.done - 1) * (self.total - self.done)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def fmt(value: Any, kind: str = "ratio") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if kind == "ratio":
        return f"{value:.2f}"
    if kind == "ratio3":
        return f"{value:.3f}"
    if kind == "usd":
        return f"${value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def results_table(title: str, rows: list[dict[str, Any]], key: str | None) -> Table:
    table = Table(title=title, title_justify="left")
    if key:
        table.add_column(key)
    for name in ("tasks", "trials", "pass@k", "pass^k", "mean score", "95% CI", "errored", "tokens", "cost"):
        table.add_column(name, justify="right")
    for row in rows:
        interval = f"[{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]" if row.get("ci_low") is not None else "–"
        cells = [str(row["tasks"]), str(row["trials"]), fmt(row["pass_at_k"]), fmt(row["pass_pow_k"]),
                 fmt(row["mean_score"]), interval, str(row["errored"]), fmt(row["tokens"], "int"),
                 fmt(row["cost_usd"], "usd")]
        table.add_row(*([str(row[key])] if key else []), *cells)
    return table


def print_summary(summary: dict[str, Any]) -> None:
    for suite in summary["suites"]:
        name = suite["suite"]
        console.print(results_table(f"suite {name}", [suite], None))
        buckets = [row for row in summary["buckets"] if row["suite"] == name]
        console.print(results_table(f"{name} by bucket", buckets, "bucket"))
        splits = [row for row in summary["splits"] if row["suite"] == name]
        if len(splits) > 1:
            console.print(results_table(f"{name} by split", splits, "split"))
    totals = summary["totals"]
    console.print(f"run {summary['run_id']}: {totals['trials']} trials, {totals['passed']} passed, "
                  f"{totals['errored']} errored; model calls {totals['model_calls']}, "
                  f"cache hits {totals['cache_hits']}, tokens {totals['prompt_tokens'] + totals['completion_tokens']:,}, "
                  f"cost ${totals['cost_usd']:.4f}", highlight=False)
    for label, key in (("errored", "errors"), ("failed", "unfinished")):
        for row in (summary.get(key) or [])[:10]:
            console.print(f"  {label}: {row['suite']}/{row['task_id']} #{row['trial']}: {row['error']}",
                          highlight=False, markup=False)
    print_judges(summary.get("judges") or [])


def print_judges(judges: list[dict[str, Any]]) -> None:
    """One line per LLM judge a run used; a flagged judge's verdicts should not be trusted to gate."""
    for judge in judges:
        mark = "[yellow]FLAGGED[/yellow]" if judge["flagged"] else "[green]calibrated[/green]"
        console.print(f"judge {judge['judge']}: {mark}: {escape(judge['reason'])}", highlight=False)


def render_decision(decision) -> Table:
    """The per-bucket before/after table of a gate decision (a `Decision` or its dict)."""
    from optimizer.reporting.decision_view import COLUMNS, decision_view

    view = decision_view(decision)
    table = Table(title=view.title, title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("bucket", "verdict") else "right")
    for row in view.rows:
        table.add_row(*(escape(cell) for cell in row.cells))
    table.caption = escape("\n".join(view.notes))
    table.caption_justify = "left"
    return table
