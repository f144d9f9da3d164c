"""`optimizer graduate`."""

from __future__ import annotations

from typing import Optional

import typer


def graduate_command(
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Capability suites to look at."),
    runs: int = typer.Option(5, min=1, max=1000, help="Consecutive recent runs that must each pass the threshold."),
    threshold: float = typer.Option(0.95, min=0.0, max=1.0, help="Share of trials that must pass in each run."),
    bucket: Optional[list[str]] = typer.Option(None, "--bucket", help="Only these buckets (suite/bucket or bucket)."),
    apply_: bool = typer.Option(False, "--apply", help="Write the regression suite and commit it."),
) -> None:
    """Propose buckets that stayed green for the regression suite; --apply commits them there."""
    from optimizer.nightly import graduation
    from optimizer.cli._common import console, project_settings
    from optimizer.errors import InputError
    from optimizer.suites import load_suites
    from optimizer.store import open_store

    root, settings = project_settings()
    suites = load_suites(suite or settings.suites, root)
    known = {f"{s.name}/{task.bucket}" for s in suites for task in s.tasks}
    names = known | {task.bucket for s in suites for task in s.tasks}  # suite/bucket or bucket
    unknown = [name for name in bucket or [] if name not in names]
    if unknown:
        raise InputError(f"no bucket {', '.join(map(repr, unknown))} in the suites looked at", field="--bucket",
                         fix=f"use suite/bucket or bucket, from: {', '.join(sorted(known))}")
    store = open_store(settings, root)
    found = graduation.candidates(store, suites, root, runs=runs, threshold=threshold)
    store.close()
    if bucket:
        found = [c for c in found if c.key in bucket or c.bucket in bucket]
    if not found:
        console.print(f"no bucket passed {threshold:.0%} of its trials in each of its last {runs} runs",
                      highlight=False)
        return
    for candidate in found:
        rates = ", ".join(f"{rate:.0%}" for rate in candidate.pass_rates)
        console.print(f"{candidate.key}: {len(candidate.task_ids)} task(s), pass rate per run (newest first) {rates}",
                      highlight=False)
    if not apply_:
        console.print("run again with --apply to copy them into the regression suite", highlight=False)
        return
    sha = graduation.apply(found, suites, root, runs=runs, threshold=threshold)
    console.print(f"committed {sha[:12]}: {', '.join(c.key for c in found)} graduated", highlight=False)
