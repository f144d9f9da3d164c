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
    from optimizer.settings.sources import find_project_root
    from optimizer.errors import EXIT_FAILED
    from optimizer.validate import validate_suites

    report = validate_suites(find_project_root(), suite or None)
    for entry in report:
        mark = "[green]ok[/green]" if not entry.failures else f"[red]{len(entry.failures)} failing[/red]"
        if entry.unreplayed:
            mark += f", [yellow]{len(entry.unreplayed)} with no reference solution to replay[/yellow]"
        console.print(f"{entry.name}: {entry.count} tasks, {mark}")
        for failure in entry.failures:
            console.print(f"  {failure}", markup=False, highlight=False)
        for task_id in entry.unreplayed:
            console.print(f"  {task_id}: no reference solution to replay (add reference_solution.tool_calls to "
                          "check it)", markup=False, highlight=False)
    total = sum(entry.count for entry in report)
    failing = sum(len(entry.failures) for entry in report)
    unreplayed = sum(len(entry.unreplayed) for entry in report)
    console.print(f"{total} tasks in {len(report)} suite(s); {total - failing - unreplayed} score 1.0 under "
                  f"mock/oracle" + (f"; {unreplayed} not checked: no reference solution" if unreplayed else ""))
    if failing:
        raise typer.Exit(EXIT_FAILED)
