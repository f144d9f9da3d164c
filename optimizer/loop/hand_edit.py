"""A person's own prompt change through the gate (`optimizer gate`): the edit stands where a
proposer's patch would, so it is measured, judged and recorded exactly like one.

Three things differ from an optimizer proposal, because the edit is someone's decision, not a
candidate to be narrowed: its parts are not ablated, the size limit on a patch
(`max_changed_lines`) does not apply, and its targets are the buckets it is for. Those are, in
order: the ones named with `--target`; else the failing train buckets whose names its changed
lines mention (`gate.named_buckets`, as the harm thresholds read a patch); else the buckets the
loop would target on the base prompt. The hard-coding lint still runs: a copied expected answer
is as wrong in a hand edit as in a patch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optimizer.errors import InputError
from optimizer.gate import named_buckets
from optimizer.proposal.diffs import changed_lines
from optimizer.proposal.proposers import Proposal, ProposalRequest
from optimizer.proposal.request import Selection, Target, bucket_status, select_targets
from optimizer.suites import Suite
from optimizer.types import Trial

PROPOSER = "hand-edit"
"""The proposer name a hand edit is recorded under."""
HAND_EDIT_LINES = 1_000_000
"""The changed-line limit a hand edit is checked against: none in practice."""


@dataclass(frozen=True)
class HandEdit:
    agent: str
    text: str
    """The edited prompt file's text."""
    source: str
    """Where it comes from (`HEAD at 1a2b3c4d5e6f`), recorded as the proposal's rationale."""
    targets: tuple[tuple[str, str], ...] = field(default=())
    """(suite, bucket) the edit is for, as given; empty: found from the edit or the baseline."""


class HandEditProposer:
    """Writes the edited prompt into the proposal's box."""

    name = PROPOSER
    note = ""
    confined = True

    def __init__(self, edit: HandEdit):
        self.edit = edit

    def propose(self, request: ProposalRequest) -> Proposal:
        (request.workdir / request.prompt_file).write_text(self.edit.text, encoding="utf-8")
        return Proposal(rationale=f"A hand edit of {request.prompt_file}: {self.edit.source}.")


def hand_selection(edit: HandEdit, diff: str, evidence: list[Trial], suites: list[Suite], *,
                   max_targets: int) -> tuple[Selection | None, str]:
    """The targets of `edit` (its unified `diff` against the base prompt) and how they were found."""
    names = [suite.name for suite in suites if suite.spec.agent_name == edit.agent and suite.spec.kind == "capability"]
    rows = {(row["suite"], row["bucket"]): row for row in bucket_status(evidence, set(names))}
    if edit.targets:
        unknown = [f"{suite}/{bucket}" for suite, bucket in edit.targets if (suite, bucket) not in rows]
        if unknown:
            raise InputError(f"no train bucket {', '.join(unknown)} in the suites of {edit.agent}", field="--target",
                             fix="name a bucket as suite/bucket: " + ", ".join(sorted("/".join(k) for k in rows)))
        return _selection(edit.agent, names, [rows[key] for key in edit.targets], rows), "named with --target"
    added, removed = changed_lines(diff)
    named = sorted(key for key in named_buckets(added + removed, rows) if rows[key]["failed"])
    if named:
        return _selection(edit.agent, names, [rows[key] for key in named[:max_targets]], rows), \
            "named by the edit's changed lines"
    return (select_targets(evidence, suites, max_targets=max_targets, agent=edit.agent),
            "the base prompt's worst failing buckets, as the loop would target")


def _selection(agent: str, names: list[str], chosen: list[dict], rows: dict) -> Selection:
    targets = [Target(row["suite"], row["bucket"], row["failed"], row["trials"], row["mean_score"]) for row in chosen]
    keys = {(t.suite, t.bucket) for t in targets}
    return Selection(agent, names, targets, [row for key, row in rows.items() if key not in keys])
