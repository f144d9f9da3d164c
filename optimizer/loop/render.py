"""What the loop writes for people: a proposal's commit message and the iteration's `report.md`.
A gate decision in either comes from `optimizer.reporting.decision_view`, as in the CLI and HTML report."""

from __future__ import annotations

from pathlib import Path

from optimizer.reporting.decision_view import COLUMNS, decision_view
from optimizer.files import write_text
from optimizer.gate import Decision
from optimizer.loop.records import IterationResult, ProposalRecord
from optimizer.proposal.request import Selection
from optimizer.proposal.pool import SearchOutcome


def commit_message(selection: Selection, decision: Decision | None, record: ProposalRecord,
                   result: IterationResult, *, headline: str, request: str | None) -> str:
    """`request`: the request's path as the commit shows it (`files.shown_path`)."""
    lines = [headline, ""]
    if decision is None:
        lines.append("Gate: not run yet")
    else:
        view = decision_view(decision)
        lines.append(f"Gate ({view.mode}, {view.stage}): {view.verdict}"
                     f" after {record.rollouts} trials in {record.batches} batch(es) of pairs")
        lines.extend(f"  {note}" for note in view.notes if note != view.trials)  # the line above says it
        lines.append("")
        lines.append("Bucket scores (before -> after, change):")
        lines.extend(f"  {row.name}: {row.before} -> {row.after} ({row.change}, {row.pairs} pairs, "
                     f"{row.verdict or 'not tested'})" for row in view.rows)
    lines += ["", f"Targeted buckets: {', '.join(f'{t.suite}/{t.bucket}' for t in selection.targets)}",
              f"Iteration: {result.iteration_id}", f"Request: {request}"]
    if record.rationale:
        lines += ["", "Rationale:", record.rationale]
    return "\n".join(lines) + "\n"


def write_report(result: IterationResult) -> Path:
    """`report.md` in the iteration's folder: targets, the search, and each proposal with its
    diff and the gate's table."""
    lines = [f"# Iteration {result.iteration_id}", "",
             f"Base `{result.base.ref}` at `{result.base.commit[:12]}`; baseline run `{result.baseline_run_id}`"
             f"{' (reused)' if result.baseline_reused else ''}; {result.rollouts} rollouts.", ""]
    if result.selection:
        lines.append("Targets: " + ", ".join(f"{t.suite}/{t.bucket}" for t in result.selection.targets))
        lines.append("")
    if result.skipped:
        lines += ["Skipped (failing in the baseline, passing every fresh confirmation trial): "
                  + ", ".join(result.skipped), ""]
    if result.search:
        lines += search_lines(result.search)
    for record in result.proposals:
        lines += [f"## Proposal {record.ordinal}: {record.status}", "", f"Branch `{record.branch}`.", "",
                  record.reason, ""]
        if record.rationale:
            lines += ["Rationale: " + record.rationale, ""]
        if (result.run_dir / f"proposal-{record.ordinal}.log").is_file():
            lines += [f"The proposer's own account: `proposal-{record.ordinal}.log`.", ""]
        if record.diff:
            lines += ["```diff", record.diff.rstrip("\n"), "```", ""]
        if record.decision:
            lines += decision_lines(record.decision)
    path = result.run_dir / "report.md"
    write_text(path, "\n".join(lines))
    return path


def decision_lines(decision: Decision) -> list[str]:
    """The gate's table and notes in markdown."""
    view = decision_view(decision)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row.cells) + " |" for row in view.rows]
    return lines + [""] + [f"- {note}" for note in view.notes] + [""]


def search_lines(outcome: SearchOutcome) -> list[str]:
    """The search's candidates as a table of the report (`search.json` has the diffs)."""
    lines = [f"## Search: {len(outcome.candidates)} candidate(s), {len(outcome.promoted)} promoted", "",
             f"{outcome.rollouts} screening trials; the base prompt screened at {_f(_or_nan(outcome.base_score))} "
             f"(targets {_f(_or_nan(outcome.base_target_score))}). Pool: `{outcome.folder}`.", "",
             "| # | status | minibatch (parent -> child) | screening | targets | why |", "|---|---|---|---|---|---|"]
    for c in outcome.candidates:
        minibatch = f"{sum(c.parent_minibatch):.2f} -> {sum(c.minibatch):.2f}" if c.minibatch else "–"
        lines.append(f"| {c.number} | {c.status} | {minibatch} | {_f(_or_nan(c.screen_score))} | "
                     f"{_f(_or_nan(c.target_score))} | {c.reason.replace('|', '/').splitlines()[0] if c.reason else ''} |")
    return lines + [""]


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _f(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"

