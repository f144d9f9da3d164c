"""`optimizer review`: a proposal's record on the console, or as markdown for a pull request."""

from __future__ import annotations

from enum import Enum
from typing import Optional

import typer

from optimizer.errors import InputError


class Format(str, Enum):
    console = "console"
    markdown = "markdown"


def review_command(
    branch: Optional[str] = typer.Argument(None, help="Proposal branch (default: the latest accepted one)."),
    merge: bool = typer.Option(False, "--merge", help="Merge the accepted branch into its base branch."),
    format: Format = typer.Option(Format.console, "--format", envvar="OPTIMIZER_REVIEW_FORMAT",
                                  help="console (tables) or markdown (GitHub-flavoured, for a pull request body)."),
    viewer_url: Optional[str] = typer.Option(None, "--viewer-url", envvar="OPTIMIZER_VIEWER_URL",
                                             help="An address of `optimizer view` that the review's readers can "
                                                  "reach: the markdown links the changed pairs there. Without it "
                                                  "the markdown names the page, in the viewer and in an export."),
    night: Optional[str] = typer.Option(None, "--night", metavar="ID",
                                        help="Review a whole nightly job (`latest`: the last one) as one markdown "
                                             "body: every patch it accepted or proposed, the watch's reverts, "
                                             "the cost."),
) -> None:
    """Show a proposal: its git diff, the bucket table before/after, the gate's reasons, cost."""
    from optimizer.cli._common import project_settings
    from optimizer.reporting.review import review
    from optimizer.store import open_store

    root, settings = project_settings()
    if night is not None:
        if branch or merge:
            raise InputError("--night reviews a whole night: it takes no BRANCH and no --merge", field="--night",
                             fix="drop BRANCH and --merge, or drop --night to review one proposal")
        from optimizer.reporting.review import review_night
        from optimizer.reporting.review_markdown import render_night_markdown

        store = open_store(settings, root)
        try:
            found = review_night(store, root, settings.state_dir, night)
        finally:
            store.close()
        typer.echo(render_night_markdown(found, viewer=viewer_url), nl=False)
        return
    store = open_store(settings, root)
    try:
        record = review(store, root, settings.state_dir, branch, merge=merge)
    finally:
        store.close()
    if format is Format.markdown:
        from optimizer.reporting.review_markdown import render_markdown

        typer.echo(render_markdown(record, viewer=viewer_url), nl=False)
    else:
        print_review(record)
    if record.merged is not None:
        typer.echo(f"{'merged' if record.merged else 'already merged:'} {record.proposal['branch']} "
                   f"into {record.iteration['base_ref']}", err=format is Format.markdown)


def print_review(record) -> None:
    """The console's layout: a rule, the diff, the gate's table, cost, judges, search, paths."""
    from optimizer.cli._common import console, print_judges, render_decision

    proposal, iteration = record.proposal, record.iteration
    console.rule(f"{proposal['branch']}: {proposal['status']}")
    console.print(f"iteration {proposal['iteration_id']}, base {iteration['base_ref']} at "
                  f"{iteration['base_commit'][:12]}, targets {', '.join(iteration['targets'])}", highlight=False)
    console.print(record.diff_source, markup=False, highlight=False)
    console.print(record.diff.rstrip("\n") or "(no change)", markup=False, highlight=False)
    if proposal.get("decision"):
        console.print(render_decision(proposal["decision"]))
    else:
        console.print(f"not evaluated: {proposal['reason']}", markup=False, highlight=False)
    console.print(f"cost: {record.cost_line}", highlight=False)
    print_judges(record.judges)
    summary = iteration.get("summary") or {}
    if summary.get("search"):
        _print_search(console, summary["search"])
    console.print(f"request: {record.request}\nreport: {record.report}", highlight=False)


def _print_search(console, search: dict) -> None:
    """The iteration's search: every candidate, its screening scores and why it was or was not
    promoted (the diffs are in the pool's candidates.json)."""
    candidates = search.get("candidates") or []
    promoted = sum(1 for c in candidates if c["status"] not in ("screened_out", "not_promoted", "rejected_check",
                                                                "no_patch", "unchanged"))
    console.print(f"search: {len(candidates)} candidate(s) screened in {search.get('rollouts', 0)} trials, "
                  f"{promoted} promoted to the gate; base prompt screened at {_score(search.get('base_score'))} "
                  f"(targets {_score(search.get('base_target_score'))}); pool {search.get('pool')}", highlight=False)
    for c in candidates:
        minibatch = (f"minibatch {sum(c['parent_minibatch']):.2f} -> {sum(c['minibatch']):.2f}, "
                     if c.get("minibatch") else "")
        console.print(f"  search candidate {c['number']}: {c['status']} ({minibatch}screening "
                      f"{_score(c.get('screen_score'))}, targets {_score(c.get('target_score'))}) {c['reason']}",
                      markup=False, highlight=False)


def _score(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"
