"""`optimizer eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._paths import output_file

def eval_command(
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Suite name or path (repeatable)."),
    agent_model: Optional[str] = typer.Option(None, help="Model that runs the agents (env OPTIMIZER_AGENT_MODEL)."),
    judge_model: Optional[str] = typer.Option(None, help="Model behind LLM graders (env OPTIMIZER_JUDGE_MODEL)."),
    trials: Optional[int] = typer.Option(None, help="Trials per task (overrides task and suite defaults)."),
    task: Optional[list[str]] = typer.Option(None, "--task", help="Only tasks whose id matches this glob (repeatable)."),
    concurrency: Optional[int] = typer.Option(None, help="Trials run at once (the `concurrency` setting)."),
    seed: Optional[int] = typer.Option(None, help="Seed passed to the models."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Call the model even for identical requests."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file, help="Write the summary as JSON here."),
    fail_under: Optional[float] = typer.Option(None, min=0.0, max=1.0,
                                               help="Exit 1 when the mean score is below this (0 to 1)."),
) -> None:
    """Run suites and print pass@k, pass^k and mean score per suite, bucket and split."""
    from optimizer.trials import evaluate
    from optimizer.cli._common import TrialProgress, print_summary, project_settings, recording
    from optimizer.errors import EXIT_FAILED, EXIT_HARNESS
    from optimizer.files import write_json
    from optimizer.store import open_store

    root, settings = project_settings(agent_model=agent_model, judge_model=judge_model, trials=trials,
                                      concurrency=concurrency, seed=seed, cache=False if no_cache else None)
    eval_plan = evaluate.prepare(settings.evaluation, root, suite or None, task)
    store = open_store(settings, root)
    with TrialProgress(len(eval_plan.trials)) as progress, recording(settings, store):
        run, summary = evaluate.execute(eval_plan, store, on_trial=progress.update)
    print_summary(summary)
    if json_path:
        write_json(json_path, summary)
    totals = summary["totals"]
    if totals["trials"] and totals["errored"] == totals["trials"]:
        typer.secho("every trial errored: this points at the setup (model, key, network), not the agent",
                    fg="red", err=True)
        raise typer.Exit(EXIT_HARNESS)
    if fail_under is not None:
        scores = [s["mean_score"] for s in summary["suites"] if s["mean_score"] is not None]
        if not scores or min(scores) < fail_under:
            raise typer.Exit(EXIT_FAILED)
