"""`optimizer suites ...`."""

from __future__ import annotations

from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, help="Check suites: load them whole and replay their reference solutions.")


@app.command("validate")
def validate_command(
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s",
                                              help="Suite name or path (default: every suite under suites/)."),
) -> None:
    """Load every suite, check graders and fixtures, and replay each task with mock/oracle (must score 1.0)."""
    from optimizer.cli._common import console
    from optimizer.config import find_project_root
    from optimizer.errors import EXIT_FAILED
    from optimizer.validate import validate_suites

    report = validate_suites(find_project_root(), suite or None)
    for name, count, failures in report:
        mark = "[green]ok[/green]" if not failures else f"[red]{len(failures)} failing[/red]"
        console.print(f"{name}: {count} tasks, {mark}")
        for failure in failures:
            console.print(f"  {failure}", markup=False, highlight=False)
    total = sum(count for _, count, _ in report)
    failing = sum(len(f) for _, _, f in report)
    console.print(f"{total} tasks in {len(report)} suite(s); {total - failing} score 1.0 under mock/oracle")
    if failing:
        raise typer.Exit(EXIT_FAILED)
