"""Output paths given on the command line, checked before any work is done: a typo in `--json`
must not surface as a crash after an hour of trials."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

import typer


def output_file(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Optional[Path]:
    """Option callback: `value` can be written as a file (it is not a folder, and a file can be
    made in the nearest existing folder above it, so the missing ones can be made too)."""
    if value is None or ctx.resilient_parsing:
        return value
    option = (param.opts or [param.name or "path"])[0]
    if value.is_dir():
        example = value / ("report.html" if option == "--html" else "out.json")
        raise typer.BadParameter(f"{value} is a folder; give a file path such as {example}", param_hint=option)
    folder = value.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise typer.BadParameter(f"{folder} is not a folder, so {value} cannot be written", param_hint=option)
    try:  # the one reliable test of "can a file be made here", for root and on odd filesystems too
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise typer.BadParameter(f"cannot write under {folder} ({exc.strerror or exc}); choose another path",
                                 param_hint=option) from None
    return value
