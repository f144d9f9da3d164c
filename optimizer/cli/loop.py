"""`optimizer run` and `optimizer noise`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._options import BATCH_PAIRS, MAX_ROLLOUTS, MIN_BUCKET_PAIRS, SEARCH_ROLLOUTS, TRIALS
from optimizer.cli._paths import output_file
from optimizer.settings.sources import setting_default


def run_command(
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Suite name or path (repeatable)."),
    proposer: Optional[str] = typer.Option(
        None, help=f"llm or command (default {setting_default('proposer')}; env OPTIMIZER_PROPOSER)."),
    candidates: Optional[int] = typer.Option(None, help="Proposals to evaluate; the best accepted one is kept."),
    gate: Optional[str] = typer.Option(None, help=f"strict or lenient (default {setting_default('gate')})."),
    agent_model: Optional[str] = typer.Option(None, help="Model that runs the agents."),
    judge_model: Optional[str] = typer.Option(None, help="Model behind LLM graders."),
    patcher_model: Optional[str] = typer.Option(None, help="Model behind the llm proposer."),
    trials: Optional[int] = TRIALS,
    max_rollouts: Optional[int] = MAX_ROLLOUTS,
    batch_pairs: Optional[int] = BATCH_PAIRS,
    min_bucket_pairs: Optional[int] = MIN_BUCKET_PAIRS,
    search_rollouts: Optional[int] = SEARCH_ROLLOUTS,
    target_buckets: Optional[int] = typer.Option(
        None, help=f"Failure buckets targeted at once, each to improve (default {setting_default('target_buckets')})."),
    base: Optional[str] = typer.Option(None, help="Branch or commit to start from (default HEAD)."),
    agent: Optional[str] = typer.Option(None, help="Only target this agent."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Stop after writing request.md."),
    concurrency: Optional[int] = typer.Option(None, help="Trials run at once."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file, help="Write the iteration summary as JSON here."),
    fail_on_reject: bool = typer.Option(False, help="Exit 1 when no proposal is accepted."),
) -> None:
    """One optimization iteration: baseline, request, proposal, branch, staged rerun, gate."""
    from optimizer.cli._common import console, loop_context, project_settings, recording, render_decision
    from optimizer.errors import EXIT_FAILED
    from optimizer.files import write_json
    from optimizer.loop.iteration import run_iteration

    root, settings = project_settings(proposer=proposer, candidates=candidates, gate=gate, agent_model=agent_model,
                               judge_model=judge_model, patcher_model=patcher_model, trials=trials, concurrency=concurrency,
                               max_rollouts=max_rollouts, batch_pairs=batch_pairs,
                               min_bucket_pairs=min_bucket_pairs, search_rollouts=search_rollouts,
                               target_buckets=target_buckets)
    ctx = loop_context(settings, root)
    with recording(settings, ctx.store):
        result = run_iteration(ctx, suite_names=suite or None, base_ref=base, dry_run=dry_run, agent=agent)
    for record in result.proposals:
        console.rule(f"proposal {record.ordinal}: {record.status}  ({record.branch})")
        if record.diff:
            console.print(record.diff.rstrip("\n"), markup=False, highlight=False)
        if record.decision:
            console.print(render_decision(record.decision))
        console.print(record.reason, markup=False, highlight=False)
    accepted = result.accepted
    console.print(f"iteration {result.iteration_id}: {result.status}; {result.rollouts} rollouts; "
                  f"request {result.request_path or '-'}", highlight=False)
    if accepted:
        console.print(f"review it: optimizer review {accepted.branch}", highlight=False)
    if json_path:
        from optimizer.loop.records import iteration_summary

        write_json(json_path, {"iteration_id": result.iteration_id, **iteration_summary(result)})
    if fail_on_reject and not accepted and result.status in ("accepted", "rejected"):
        raise typer.Exit(EXIT_FAILED)


def noise_command(
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Suite name or path (repeatable)."),
    repeats: int = typer.Option(20, min=1, max=10000,
                                help="Repeats: each draws a baseline and compares its candidates (at most 10,000)."),
    agent_model: Optional[str] = typer.Option(None, help="Model that runs the agents."),
    judge_model: Optional[str] = typer.Option(None, help="Model behind LLM graders."),
    trials: Optional[int] = TRIALS,
    sim_noise: str = typer.Option("independent", help="mock/sim's randomness between prompts: independent "
                                                      "(as a real model at temperature > 0) or paired."),
) -> None:
    """The gate's error rates, each with a 95% interval.

    False accepts (A/A), and on mock/sim the power for the sim's right rule and the acceptance of
    a harmful patch."""
    from optimizer.cli._common import console, loop_context, project_settings, recording
    from optimizer.loop.noise import measure_noise

    root, settings = project_settings(agent_model=agent_model, judge_model=judge_model, trials=trials, sim_noise=sim_noise)
    ctx = loop_context(settings, root)
    with recording(settings, ctx.store):
        result = measure_noise(ctx, repeats=repeats, suite_names=suite or None)
    console.print(f"repeats: {result.repeats} ({result.skipped} with nothing to target); "
                  f"rollouts {result.rollouts}", highlight=False)
    labels = {"A/A": "false accepts (A/A)", "good": "power (the sim's rule for the target)",
              "harmful": "harmful accepts (rule + contradiction of a one-task bucket)"}
    for case, tally in result.cases.items():
        if not tally.decisions:
            continue
        low, high = tally.interval
        console.print(f"{labels[case]}: {tally.accepts}/{tally.decisions} = {tally.rate:.1%} "
                      f"[95% CI {low:.1%}, {high:.1%}]; {tally.mean_rollouts:.0f} rollouts per decision, "
                      f"{tally.capped} at the budget", highlight=False, markup=False)
