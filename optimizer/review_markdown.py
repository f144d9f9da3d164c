"""A proposal's review as GitHub-flavoured markdown, for a pull request's body or a comment.

Same record as the console's `optimizer review`, laid out for a reader on GitHub: the gate's
verdict first, the diff (collapsed when long), the bucket table with intervals, the gate's rules,
cost, and a link to the pairs whose outcome changed in `optimizer view`. The numbers and labels
come from `decision_view`, so the markdown never says something the console does not.
"""

from __future__ import annotations

import re

from optimizer.decision_view import COLUMNS, decision_view
from optimizer.review import DIFF_OPEN_LINES, MARKDOWN_LIMIT, VIEWER_URL, Review, changed_pairs_url

LINE_LIMIT = 400
"""A diff line is shown up to this many characters, with a note of the rest: one very long line
would otherwise push the whole diff past the pull request's limit, and the reviewer would see
none of it."""
SECTIONS = ("Diff", "Gate", "Cost", "Changed pairs")
"""The `###` headings of a markdown review, in order (docs/review-example.md is checked against them)."""


def render_markdown(review: Review, *, viewer: str = VIEWER_URL, limit: int = MARKDOWN_LIMIT) -> str:
    """The review as markdown of at most `limit` characters; past it the diff is cut, with a note."""
    head, tail = _head(review), _tail(review, viewer)
    lines = [_cut(line) for line in review.diff.rstrip("\n").splitlines()]
    text = _join(head, _diff_block(review, lines), tail)
    kept = len(lines)
    while len(text) > limit and kept > 0:
        kept = max(0, kept - max(1, (len(text) - limit) // 40 or 1))
        text = _join(head, _diff_block(review, lines, kept), tail)
    return text


def _join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part) + "\n"


def _head(review: Review) -> str:
    proposal, iteration = review.proposal, review.iteration
    decision = proposal.get("decision")
    verdict = decision_view(decision).title if decision else f"not evaluated: {proposal['reason']}"
    targets = ", ".join(_code(target) for target in iteration["targets"]) or "none"
    return (f"## Prompt patch {_code(proposal['branch'])}: {_escape(proposal['status'])}\n\n"
            f"**{_escape(verdict)}**. Iteration {_code(proposal['iteration_id'])}, base {_code(iteration['base_ref'])} "
            f"at {_code(iteration['base_commit'][:12])}, targets {targets}.")


def _diff_block(review: Review, lines: list[str], kept: int | None = None) -> str:
    kept = len(lines) if kept is None else kept
    if not lines:
        return "### Diff\n\n(no change)"
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
    return f"### Diff\n\n{body}{note}"


def _tail(review: Review, viewer: str) -> str:
    parts = [_gate(review.proposal.get("decision")),
             "### Cost\n\n" + "\n".join([f"- {_dollars(review.cost_line)}"] + [
                 f"- judge `{j['judge']}`: {'**flagged**' if j['flagged'] else 'calibrated'}: {_escape(j['reason'])}"
                 for j in review.judges])]
    summary = review.iteration.get("summary") or {}
    url = changed_pairs_url(viewer, review.proposal["iteration_id"])
    parts.append(f"### Changed pairs\n\n[The pairs whose outcome changed]({url}), base and candidate transcripts "
                 f"side by side (served by `optimizer view`). Request: `{review.iteration.get('request_path')}`; "
                 f"report: `{summary.get('report')}`.")
    return "\n\n".join(parts)


def _gate(decision) -> str:
    if not decision:
        return "### Gate\n\nThe gate did not run."
    view = decision_view(decision)
    rows = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" if name in ("bucket", "verdict") else "---:"
                                                           for name in COLUMNS) + "|"]
    rows += ["| " + " | ".join(_escape(cell) for cell in row.cells) + " |" for row in view.rows]
    rules = [f"- {'✅' if rule.passed else '❌'} **{_escape(rule.rule)}**: {_escape(rule.reason)}" for rule in view.rules]
    notes = [f"_{_escape(note)}_" for note in (view.unattended, view.non_voting, view.trials) if note]
    return "\n\n".join(["### Gate", "\n".join(rows), "\n".join(rules), *notes,
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
