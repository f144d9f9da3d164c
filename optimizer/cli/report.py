"""`optimizer report`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._paths import output_file


def report_command(
    run_id: Optional[str] = typer.Argument(None, help="Nightly or iteration id (default: the latest night, "
                                                      "else the latest iteration; see `optimizer history`)."),
    html: Path = typer.Option(..., "--html", callback=output_file, help="Write the self-contained HTML page here."),
) -> None:
    """A self-contained HTML report: bucket table, score charts, cost, proposals with diffs and gate reasons, failures."""
    from optimizer.reporting import html as html_report
    from optimizer.cli._common import console, project_settings
    from optimizer.files import write_text
    from optimizer.store import open_store

    root, settings = project_settings()
    store = open_store(settings, root)
    data = html_report.build(store, run_id)
    store.close()
    write_text(html, html_report.render(data))
    console.print(f"wrote {html} ({data['title']}: {len(data['iterations'])} iteration(s), "
                  f"{data['accepted']} accepted)", highlight=False, soft_wrap=True)
