"""`optimizer history`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._paths import output_file


def history_command(
    limit: int = typer.Option(20, min=1, max=100000, help="Most recent nightly jobs, iterations and runs to show."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file, help="Write the tables as JSON here."),
) -> None:
    """Nightly jobs, iterations and their decisions, runs with per-bucket scores, and cost per role."""
    from rich.table import Table

    from optimizer.cli._common import console
    from optimizer.files import write_json
    from optimizer.reporting.history import load_history
    from optimizer.settings.sources import find_project_root, store_url_as_given
    from optimizer.store.quick import read_quickly

    root = find_project_root()
    # A SQLite store read as it is needs only its address: the other settings are neither read
    # nor checked (importing and building the settings models took about a sixth of its time).
    url = store_url_as_given(root)
    history = read_quickly(url, lambda quick: load_history(quick, limit)) if url else None
    if history is None:  # PostgreSQL, no store yet, one to migrate, or a fault the Store reports
        from optimizer.settings.loading import load_settings
        from optimizer.store import open_store

        settings = load_settings(root)
        store = open_store(settings, root)
        history = load_history(store, limit)
        store.close()

    def show(title: str, rows: list[dict], columns: list[str] | None = None) -> None:
        if not rows:
            console.print(f"{title}: none", highlight=False)
            return
        table = Table(title=title, title_justify="left")
        shown = columns or list(rows[0])
        for column in shown:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*[_cell(row.get(column), column) for column in shown])
        console.print(table)

    show("nightly jobs", history.nightlies)
    show("iterations", history.iterations)
    show("runs", history.runs)
    buckets = history.bucket_scores
    show("bucket mean score per run (latest 6)", buckets, ["bucket", *list(buckets[0])[1:][-6:]] if buckets else None)
    show("cost by role (all recorded calls)", history.cost_by_role)
    if json_path:
        write_json(json_path, {name: _records(getattr(history, name))
                               for name in ("nightlies", "iterations", "runs", "bucket_scores", "cost_by_role")})


def _records(rows: list[dict]) -> list[dict]:
    """Rows for JSON: a missing value is null (JSON has no NaN; strict parsers reject it)."""
    return [{key: None if _missing(value) else value for key, value in row.items()} for row in rows]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell(value, column: str) -> str:
    if _missing(value):
        return "–"
    if isinstance(value, float):
        if column.endswith("usd"):
            return f"${value:,.4f}"
        return f"{value:,.0f}" if column in ("tokens", "calls") else f"{value:.2f}"
    return str(value)
