"""A proposal's review as GitHub-flavoured markdown, for a pull request's body or a comment.

Same record as the console's `optimizer review`, laid out for a reader on GitHub: the gate's
verdict first, the diff (collapsed when long), the bucket table with intervals, the gate's rules,
cost, and a link to the pairs whose outcome changed in `optimizer view`. The numbers and labels
come from `decision_view`, so the markdown never says something the console does not.
"""

from __future__ import annotations

import re

from optimizer.reporting.decision_view import COLUMNS, decision_view
from optimizer.reporting.review import DIFF_OPEN_LINES, MARKDOWN_LIMIT, NightReview, Review, changed_pairs_url

LINE_LIMIT = 400
"""A diff line is shown up to this many characters, with a note of the rest: one very long line
would otherwise push the whole diff past the pull request's limit, and the reviewer would see
none of it."""
SECTIONS = ("Diff", "Gate", "Cost", "Changed pairs")
"""The `###` headings of a markdown review, in order (docs/review-example.md is checked against them)."""


def render_markdown(review: Review, *, viewer: str | None = None, limit: int = MARKDOWN_LIMIT,
                    level: int = 2) -> str:
    """The review as markdown of at most `limit` characters; past it the diff is cut, with a note.
    `level`: the depth of its title's heading (its sections one deeper), for a body it is part of."""
    head, tail = _head(review, level), _tail(review, viewer, level + 1)
    lines = [_cut(line) for line in review.diff.rstrip("\n").splitlines()]
    text = _join(head, _diff_block(review, lines, level=level + 1), tail)
    kept = len(lines)
    while len(text) > limit and kept > 0:
        kept = max(0, kept - max(1, (len(text) - limit) // 40 or 1))
        text = _join(head, _diff_block(review, lines, kept, level + 1), tail)
    return text


def _join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part) + "\n"


def _head(review: Review, level: int) -> str:
    proposal, iteration = review.proposal, review.iteration
    decision = proposal.get("decision")
    verdict = decision_view(decision).title if decision else f"not evaluated: {proposal['reason']}"
    targets = ", ".join(_code(target) for target in iteration["targets"]) or "none"
    return (f"{'#' * level} Prompt patch {_code(proposal['branch'])}: {_escape(proposal['status'])}\n\n"
            f"**{_escape(verdict)}**. Iteration {_code(proposal['iteration_id'])}, base {_code(iteration['base_ref'])} "
            f"at {_code(iteration['base_commit'][:12])}, targets {targets}.")


def _diff_block(review: Review, lines: list[str], kept: int | None = None, level: int = 3) -> str:
    kept = len(lines) if kept is None else kept
    if not lines:
        return f"{'#' * level} Diff\n\n(no change)"
    shown = "\n".join(lines[:kept])
    fence = "`" * max(3, _longest_backticks(shown) + 1)
    body = f"{fence}diff\n{shown}\n{fence}" if kept else ""
    note = (f"\n\n_Diff cut at {kept} of {len(lines)} lines to fit a pull request; "
            f"the whole diff: `{review.git_diff}`._") if kept < len(lines) else ""
    source = (f"`{review.diff_source[2:]}`" if review.diff_source.startswith("$ ")
              else f"_{_escape(review.diff_source)}_")
    if len(lines) > DIFF_OPEN_LINES:
        body = f"<details><summary>{len(lines)} lines: {source}</summary>\n\n{body}\n\n</details>"
    else:
        body = f"{source}\n\n{body}"
    return f"{'#' * level} Diff\n\n{body}{note}"


def _tail(review: Review, viewer: str | None, level: int) -> str:
    mark = "#" * level
    parts = [_gate(review.proposal.get("decision"), level), f"{mark} Cost\n\n" + "\n".join(_cost_lines(review))]
    parts.append(f"{mark} Changed pairs\n\n" + _pairs_line(review, viewer)
                 + f" Request: `{review.request}`; report: `{review.report}`.")
    return "\n\n".join(parts)


def _cost_lines(review: Review) -> list[str]:
    return [f"- {_dollars(review.cost_line)}"] + [
        f"- judge `{j['judge']}`: {'**flagged**' if j['flagged'] else 'calibrated'}: {_escape(j['reason'])}"
        for j in review.judges]


def _pairs_line(review: Review, viewer: str | None) -> str:
    """Where the pairs whose outcome the patch changed are seen: a link when the review was given
    a viewer address its readers reach, else the page's name in `optimizer view` and in an export."""
    iteration_id = review.proposal["iteration_id"]
    if viewer:
        return (f"[The pairs whose outcome changed]({changed_pairs_url(viewer, iteration_id)}), base and candidate "
                f"transcripts side by side.")
    return (f"The pairs whose outcome changed, base and candidate transcripts side by side: `optimizer view`, page "
            f"`/iterations/{iteration_id}/changed` (in an `optimizer view --export` folder: "
            f"`iterations/{iteration_id}/changed.html`).")


def render_night_markdown(night: NightReview, *, viewer: str | None = None, limit: int = MARKDOWN_LIMIT) -> str:
    """A whole night as one pull request body: a summary line, the night's iterations, then each
    patch it accepted (merged, stacked or proposed) with its diff, gate table, verdict and open
    groups, the watch's reverts and the cost; past `limit` characters every diff is cut alike."""
    head = _night_head(night, viewer)
    lines = [[_cut(line) for line in review.diff.rstrip("\n").splitlines()] for _, review in night.patches]
    kept = max((len(patch) for patch in lines), default=0)
    while True:
        blocks = [_night_patch(night, row, review, patch, kept, viewer)
                  for (row, review), patch in zip(night.patches, lines)]
        text = _join(head, *blocks, _night_tail(night))
        if len(text) <= limit or kept == 0:
            return text
        kept = max(0, kept - max(1, (len(text) - limit) // (40 * max(1, len(blocks)))))


def _night_head(night: NightReview, viewer: str | None) -> str:
    record, state = night.night, night.state
    rows = state.get("iterations") or []
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    stacked = "merged" if state.get("merged") else "stacked on the branch"
    others = sum(n for status, n in counts.items() if status not in ("accepted", "proposed"))
    summary = ", ".join(part for part in (
        f"{counts.get('accepted', 0)} patch(es) {stacked}",
        f"{counts['proposed']} proposed for review" if counts.get("proposed") else "",
        f"{len(night.reverts)} revert(s) by the watch" if night.reverts else "",
        f"{others} iteration(s) without a patch" if others else "") if part)
    trials = sum(row.get("rollouts") or 0 for row in rows)
    spent = f"${state.get('spent_usd', 0.0):.4f}"
    table = ["| # | iteration | agent | targets | outcome | reason |", "|---:|---|---|---|---|---|"]
    table += [f"| {row['number']} | {_code(row['iteration_id'])} | {_escape(row.get('agent') or '')} | "
              f"{', '.join(_code(t) for t in row.get('targets') or []) or '–'} | {_escape(_outcome(row, state))} | "
              f"{_escape(_short(row.get('reason') or ''))} |" for row in rows]
    night_page = (f"[the night in the viewer]({viewer.rstrip('/')}/night/{record['nightly_id']})" if viewer else
                  f"`optimizer view`, page `/night/{record['nightly_id']}`")
    return (f"## Prompt night {_code(record['nightly_id'])}: {summary}\n\n"
            f"Branch {_code(record['branch'])} from {_code(record['base_ref'])} at {_code(record['base_commit'][:12])}; "
            f"stopped: {_escape(state.get('stop_reason') or record.get('status', ''))}; {trials:,} trials; "
            f"spent {_dollars(spent)} and {state.get('spent_tokens', 0):,} "
            f"tokens. Every page of the night: {night_page}.\n\n" + "\n".join(table))


def _outcome(row: dict, state: dict) -> str:
    if row["status"] == "accepted":
        return "merged" if state.get("merged") else "stacked"
    if row["status"] == "proposed":
        return f"proposed (branch {row.get('review_branch')})"
    return row["status"]


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _night_patch(night: NightReview, row: dict, review: Review, lines: list[str], kept: int,
                 viewer: str | None) -> str:
    decision = review.proposal.get("decision")
    verdict = decision_view(decision).title if decision else "not evaluated"
    shown = min(kept, len(lines))
    diff = _diff_block(review, lines, shown, level=4)
    gate = _gate(decision, level=4)
    return "\n\n".join([
        f"### {row['number']}. {_code(review.proposal['branch'])}: {_escape(_outcome(row, night.state))}",
        f"**{_escape(verdict)}**. Targets {', '.join(_code(t) for t in review.iteration['targets']) or 'none'}. "
        + _pairs_line(review, viewer), diff, gate, "#### Cost\n\n" + "\n".join(_cost_lines(review))])


def _night_tail(night: NightReview) -> str:
    if not night.reverts:
        return ""
    return "### Reverted by the watch\n\n" + "\n".join(
        f"- {_code(sha[:12])} {_escape(subject)}" for sha, subject in night.reverts) + \
        "\n\nEach revert's commit message carries the evidence (pairs, changes and e-values per group)."


def _gate(decision, level: int = 3) -> str:
    if not decision:
        return f"{'#' * level} Gate\n\nThe gate did not run."
    view = decision_view(decision)
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" if name in ("bucket", "verdict") else "---:"
                                                           for name in COLUMNS) + "|"]
    rows += ["| " + " | ".join(_escape(cell) for cell in row.cells) + " |" for row in view.rows]
    rules = [f"- {'✅' if rule.passed else '❌'} **{_escape(rule.rule)}**: {_escape(rule.reason)}" for rule in view.rules]
    notes = [f"_{_escape(note)}_" for note in (view.unattended, view.non_voting, view.shown, view.trials) if note]
    return "\n\n".join([f"{'#' * level} Gate", "\n".join(rows), "\n".join(rules), *notes,
                        "`*` marks a bucket the iteration targeted."])


def _cut(line: str) -> str:
    if len(line) <= LINE_LIMIT:
        return line
    return f"{line[:LINE_LIMIT]} … ({len(line) - LINE_LIMIT:,} more characters on this line)"


def _code(text) -> str:
    """`text` as an inline code span whatever backticks it holds (HTML in one is shown as text)."""
    text = " ".join(str(text).split())
    fence = "`" * (_longest_backticks(text) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _escape(text: str) -> str:
    """Text safe in a table cell and outside code: pipes, HTML and markdown's emphasis characters."""
    return re.sub(r"([|*_`<>\[\]\\])", r"\\\1", str(text))


def _dollars(text: str) -> str:
    """Amounts in code spans: two dollar signs on a line are inline math to GitHub."""
    return re.sub(r"\$[0-9][0-9.,]*", lambda found: f"`{found.group()}`", text)


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)
