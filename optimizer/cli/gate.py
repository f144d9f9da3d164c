"""`optimizer gate`: a person's prompt change (a pull request's head against its base) through the
gate, with the markdown review as the result and the verdict as the exit status."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._paths import output_file


def gate_command(
    base: str = typer.Option(..., "--base", help="Branch or commit the change is measured against (a pull "
                                                 "request's base, e.g. origin/main)."),
    head: str = typer.Option("HEAD", "--head", help="Commit holding the edited prompts (default HEAD)."),
    target: Optional[list[str]] = typer.Option(None, "--target", "-t", metavar="SUITE/BUCKET",
                                               help="A bucket the edit is for (repeatable). Default: the failing "
                                                    "buckets its changed lines name, else the worst failing ones."),
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Suite name or path (repeatable)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", callback=output_file,
                                          help="Write the markdown review here (default: stdout)."),
    viewer_url: Optional[str] = typer.Option(None, "--viewer-url", envvar="OPTIMIZER_VIEWER_URL",
                                             help="An address of `optimizer view` the review's readers reach."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file,
                                             help="Write each agent's verdict and iteration as JSON here."),
) -> None:
    """Gate a hand edit of the prompts, as a proposal would be gated.

    Each agent whose prompt file differs between BASE and HEAD is measured and judged. Exit 0 when
    every edit is accepted, 1 when one is not (the review names why), 2 on bad input."""
    from optimizer.cli._common import err_console, loop_context, project_settings, recording
    from optimizer.errors import EXIT_FAILED
    from optimizer.files import write_json, write_text
    from optimizer.loop.hand_gate import gate_edits, render_gate

    root, settings = project_settings()
    ctx = loop_context(settings, root)
    with recording(settings, ctx.store):
        outcome = gate_edits(ctx, base=base, head=head, targets=target or [], suite_names=suite or None)
    body = render_gate(ctx, outcome, viewer=viewer_url)
    if output is not None:
        write_text(output, body)
    else:
        typer.echo(body, nl=False)
    for line in outcome.lines:
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)
    if json_path:
        write_json(json_path, outcome.as_dict())
    if not outcome.passed:
        raise typer.Exit(EXIT_FAILED)
