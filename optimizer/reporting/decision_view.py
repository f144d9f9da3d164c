"""A gate decision rendered once, for its four outputs: the commit message, `report.md`, the CLI
table (`optimizer run`, `optimizer review`) and the HTML report.

The labels, formatted numbers, verdicts and notes are made here; each output only lays them out
in its medium (plain text, markdown, rich, HTML), so the four never disagree on what a decision
says. It reads a `Decision` or the dict it is stored as (`Decision.as_dict`), also one stored by
an older version that lacks a field (shown as `MISSING`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the gate pulls in numpy: not for a page or a table of a stored decision
    from optimizer.gate import Decision

COLUMNS = ("bucket", "pairs", "before", "after", "change", "95% interval", "verdict", "p improve", "p harm",
           "detectable drop")
MISSING = "–"
NON_VOTING = "Not voting (LLM judges not calibrated on the judge model in use)"
SHOWN = "Not paired (their input is shown in the prompt as a worked example)"
SUMMARIES = (("overall (train)", "overall"), ("holdout", "holdout"))
"""The decision's summary groups, shown as rows after its buckets (label, key in the decision)."""


@dataclass(frozen=True)
class Row:
    """One group of the decision: a bucket, a regression suite, or a summary (overall, holdout)."""

    label: str
    """`suite/bucket`, or the summary's name."""
    targeted: bool
    kind: str
    verdict: str
    """The gate's verdict; empty for a group it did not test."""
    pairs: str
    before: str
    after: str
    change: str
    interval: str
    p_improve: str
    p_harm: str
    mde: str

    @property
    def suite_bucket(self) -> tuple[str, str] | None:
        """(suite, bucket) of a row that is one bucket, for a link to its pairs; else None."""
        suite, slash, bucket = self.label.partition("/")
        return (suite, bucket) if slash and self.kind not in dict(SUMMARIES).values() else None

    @property
    def name(self) -> str:
        """The label, marked `* ` when the iteration targeted it."""
        return f"* {self.label}" if self.targeted else self.label

    @property
    def cells(self) -> tuple[str, ...]:
        """One cell per `COLUMNS`."""
        return (self.name, self.pairs, self.before, self.after, self.change, self.interval,
                self.verdict or MISSING, self.p_improve, self.p_harm, self.mde)


@dataclass(frozen=True)
class RuleLine:
    rule: str
    passed: bool
    reason: str

    @property
    def text(self) -> str:
        return f"{'pass' if self.passed else 'FAIL'} {self.rule}: {self.reason}"


@dataclass(frozen=True)
class DecisionView:
    accepted: bool
    mode: str
    stage: str
    rows: list[Row]
    rules: list[RuleLine]
    non_voting: str
    """`NON_VOTING` and the graders left out, or empty when every grader voted."""
    trials: str
    """The trials the comparison ran (and whether the budget ended it), or empty when not known."""
    unattended: str = ""
    """For an accept, what an unattended job may do with it (`merge` or `propose`, with the harm
    groups still open), or empty."""
    shown: str = ""
    """`SHOWN` and the tasks left out of the pairs as worked examples, or empty."""

    @property
    def verdict(self) -> str:
        return "accepted" if self.accepted else "rejected"

    @property
    def title(self) -> str:
        return f"gate ({self.mode}, {self.stage}): {'ACCEPTED' if self.accepted else 'rejected'}"

    @property
    def notes(self) -> list[str]:
        """The rules' outcomes, then the non-voting graders, the tasks shown as examples and the
        trials run, when there are."""
        return [rule.text for rule in self.rules] + [note for note in (self.unattended, self.non_voting, self.shown,
                                                                       self.trials) if note]


def decision_view(decision: Decision | dict[str, Any]) -> DecisionView:
    data = decision if isinstance(decision, dict) else decision.as_dict()
    rows = [_row(bucket) for bucket in data.get("buckets") or []]
    for label, key in SUMMARIES:
        summary = data.get(key) or {}
        if summary.get("pairs") and not any(row.kind == key for row in rows):
            rows.append(_row({**summary, "suite": "", "bucket": label, "kind": key}))
    non_voting = data.get("non_voting") or []
    rollouts = data.get("rollouts")
    return DecisionView(
        accepted=bool(data.get("accepted")), mode=data.get("mode", ""), stage=data.get("stage", ""), rows=rows,
        rules=[RuleLine(rule["rule"], rule["passed"], rule["reason"]) for rule in data.get("rules") or []],
        non_voting=f"{NON_VOTING}: {', '.join(non_voting)}" if non_voting else "",
        trials=f"{rollouts} trials{' (budget reached)' if data.get('capped') else ''}" if rollouts else "",
        unattended=_unattended(data),
        shown=f"{SHOWN}: {', '.join(data['shown_tasks'])}" if data.get("shown_tasks") else "")


def _unattended(data: dict[str, Any]) -> str:
    """The accept's verdict for unattended jobs (`gate.rules.verdict_of`), with the open groups."""
    verdict, open_groups = data.get("verdict"), data.get("open_groups") or []
    if not data.get("accepted") or not verdict:
        return ""
    still = f"; still open: {'; '.join(open_groups)}" if open_groups else "; no harm group left open"
    what = ("merge: an unattended night may merge it" if verdict == "merge"
            else "propose: for a reviewer; an unattended night does not merge it")
    return f"{what}{still}"


def _row(bucket: dict[str, Any]) -> Row:
    suite = bucket.get("suite")
    holm = bucket.get("p_improve_holm")  # decisions recorded before the intersection-union test
    low, high = _number(bucket.get("ci_low")), _number(bucket.get("ci_high"))
    return Row(label=f"{suite}/{bucket['bucket']}" if suite not in ("", "*", None) else bucket["bucket"],
               targeted=bool(bucket.get("targeted")), kind=bucket.get("kind") or "bucket",
               verdict=bucket.get("verdict") or "", pairs=_cell(bucket.get("pairs"), "{}"),
               before=_cell(bucket.get("before")), after=_cell(bucket.get("after")),
               change=_cell(bucket.get("change"), "{:+.2f}"),
               interval=MISSING if low is None or high is None else f"[{low:+.2f}, {high:+.2f}]",
               p_improve=_cell(holm if holm is not None else bucket.get("p_improve"), "{:.3f}"),
               p_harm=_cell(bucket.get("p_harm"), "{:.3f}"), mde=_cell(bucket.get("mde")))


def _number(value: Any) -> float | int | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _cell(value: Any, form: str = "{:.2f}") -> str:
    value = _number(value)
    return MISSING if value is None else form.format(value)
