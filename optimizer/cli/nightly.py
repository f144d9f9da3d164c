"""`optimizer nightly`."""

from __future__ import annotations

import os
from datetime import date as Date
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from optimizer.cli._options import BATCH_PAIRS, MAX_ROLLOUTS, MIN_BUCKET_PAIRS, SEARCH_ROLLOUTS, TRIALS
from optimizer.cli._paths import output_file
from optimizer.settings.sources import setting_default


NOT_NIGHT_SETTINGS = ("resume", "override", "plain", "json_path")
"""The nightly command's parameters that are not part of a night (`optimizer.settings.night`)."""


def nightly_command(
    command: typer.Context,
    suite: Optional[list[str]] = typer.Option(None, "--suite", "-s", help="Suite name or path (repeatable; "
                                                                         "default: every capability suite)."),
    base: Optional[str] = typer.Option(None, help="Branch or commit the night starts from (default HEAD)."),
    max_iterations: int = typer.Option(10, min=1, max=1000, help="Stop after this many iterations (at most 1,000)."),
    time_limit: Optional[str] = typer.Option(None, help="Stop starting iterations after this long: 90m, 8h, 1d, 3600s."),
    budget_usd: Optional[float] = typer.Option(None, min=0, help="Refuse any model call that would pass this cost."),
    budget_tokens: Optional[int] = typer.Option(None, min=0, help="Refuse any model call that would pass this many tokens."),
    patience: int = typer.Option(3, min=1, max=1000, help="Stop after this many consecutive rejected iterations."),
    order: str = typer.Option("worst-first", help="worst-first (most failing trials) or alternate between agents."),
    merge: bool = typer.Option(False, "--merge", help="Merge the nightly branch into the base branch when every "
                                                     "commit on it passed the strict gate."),
    agent_model: Optional[str] = typer.Option(None, help="Model that runs the agents."),
    judge_model: Optional[str] = typer.Option(None, help="Model behind LLM graders."),
    patcher_model: Optional[str] = typer.Option(None, help="Model behind the llm proposer."),
    proposer: Optional[str] = typer.Option(None, help=f"llm or command (default {setting_default('proposer')})."),
    trials: Optional[int] = TRIALS,
    search_rollouts: Optional[int] = SEARCH_ROLLOUTS,
    target_buckets: Optional[int] = typer.Option(
        None, help=f"Failure buckets targeted at once, each must improve "
                   f"(default {setting_default('target_buckets')}; docs/search.md measured 4 with a search)."),
    min_bucket_pairs: Optional[int] = MIN_BUCKET_PAIRS,
    max_rollouts: Optional[int] = MAX_ROLLOUTS,
    batch_pairs: Optional[int] = BATCH_PAIRS,
    day: Optional[str] = typer.Option(None, "--date", help="Date in the branch name (default today), YYYY-MM-DD."),
    resume: bool = typer.Option(False, "--resume", help="Continue the newest night of this repository that did not "
                                                        "finish, with every setting it started with (finished "
                                                        "trials are kept); a flag given again must agree."),
    override: Optional[list[str]] = typer.Option(
        None, "--override", help="With --resume: run the rest of the night with this invocation's value of this "
                                 "flag or setting, e.g. --override trials --trials 3 (repeatable)."),
    plain: bool = typer.Option(False, "--plain", help="No progress bars: timestamped log lines (cron, CI)."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file, help="Write the night's summary as JSON here."),
) -> None:
    """Unattended optimization: iterations until a limit, accepted patches stacked on optimizer/nightly-<date>."""
    from optimizer.cli._common import err_console, interactive, loop_context, project_settings
    from optimizer.ledger import Budget
    from optimizer.nightly.night import run_nightly
    from optimizer.nightly.results import NightlyLimits, parse_duration

    when = _checked_date(order, day)
    if plain:
        os.environ["OPTIMIZER_PLAIN"] = "1"
    limits = NightlyLimits(max_iterations=max_iterations,
                           time_limit_s=parse_duration(time_limit) if time_limit else None,
                           budget=Budget(usd=budget_usd, tokens=budget_tokens), patience=patience, order=order)
    root, settings = project_settings(agent_model=agent_model, judge_model=judge_model, patcher_model=patcher_model,
                               proposer=proposer, trials=trials, search_rollouts=search_rollouts,
                               target_buckets=target_buckets, min_bucket_pairs=min_bucket_pairs,
                               max_rollouts=max_rollouts, batch_pairs=batch_pairs)
    ctx = loop_context(settings, root)
    if not interactive():
        ctx.log = lambda message: err_console.print(f"{datetime.now().isoformat(timespec='seconds')} {message}",
                                                    highlight=False, markup=False, soft_wrap=True)
    result = run_nightly(ctx, suite_names=suite or None, base_ref=base, limits=limits, merge=merge, day=when,
                         resume=resume, given=_given(command), overrides=override or ())
    _report(ctx, result, json_path)


def _checked_date(order: str, day: Optional[str]) -> Optional[Date]:
    """The night's date from `--date`, once `--order` and `--date` are known to be readable."""
    from optimizer.errors import InputError

    if order not in ("worst-first", "alternate"):
        raise InputError(f"unknown order {order!r}", field="--order", fix="use worst-first or alternate")
    try:
        return Date.fromisoformat(day) if day else None
    except ValueError:
        raise InputError(f"cannot read the date {day!r}", field="--date", fix="use YYYY-MM-DD") from None


def _report(ctx, result, json_path: Optional[Path]) -> None:
    """The night's summary on the console (and as JSON), with the bound on its false accepts."""
    from optimizer.cli._common import console
    from optimizer.files import write_json
    from optimizer.nightly.night import decisions
    from optimizer.nightly.results import split_changes
    from optimizer.nightly.spending import spent

    summary = result.as_dict()
    gated = decisions(ctx.store, result)
    bound = spent(ctx.settings.loop.gate_policy.alpha, ctx.settings.loop.night_alpha, gated)
    summary.update(gate_decisions=gated, false_accept_bound=bound)
    if json_path:
        write_json(json_path, summary)
    console.print(f"nightly {result.nightly_id}: {len(result.iterations)} iteration(s), {len(result.accepted)} "
                  f"accepted on {result.branch}; stopped: {result.stop_reason}; spent ${result.spent_usd:.4f}, "
                  f"{result.spent_tokens:,} tokens{'; merged' if result.merged else ''}", highlight=False,
                  soft_wrap=True)
    console.print(f"the gate decided {gated} candidate(s), each at its share of night_alpha: the chance this night "
                  f"merged a patch that changes nothing is at most {bound:.3f} (night_alpha "
                  f"{ctx.settings.loop.night_alpha})", highlight=False, soft_wrap=True)
    for row in result.iterations:
        console.print(f"  {row['number']:>2}. {row['status']:<16} {', '.join(row.get('targets') or []) or '-'}"
                      f"{'  ' + row['commit'][:12] if row.get('commit') else ''}"
                      f"{'  ' + split_changes(row) if split_changes(row) else ''}"
                      f"{'  on ' + row['review_branch'] + ', body ' + row['review_body'] if row.get('review_branch') else ''}",
                      highlight=False, markup=False)
    for item in result.watch or []:
        console.print(f"  watch: {item['status']:<9} {item['headline']} ({item['commit'][:12]}), {item['nights']} "
                      f"night(s){': ' + item['reason'] if item['reason'] else ''}", highlight=False, markup=False)
    if result.accepted or result.reverts or any(row["status"] == "proposed" for row in result.iterations):
        console.print(f"review it: git log -p {result.base_commit[:12]}..{result.branch}; the night as one pull "
                      f"request body: optimizer review --format markdown --night {result.nightly_id}",
                      highlight=False, soft_wrap=True)


def _given(command: typer.Context) -> set[str]:
    """The night's flags set on this command line, by their stored names (`--date` is `date`).
    Typer vendors its own click, so the source is compared by its name."""
    return {"date" if name == "day" else name for name in command.params if name not in NOT_NIGHT_SETTINGS
            and getattr(command.get_parameter_source(name), "name", None) == "COMMANDLINE"}
