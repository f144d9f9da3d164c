"""The proposals table: each patch an iteration tried, with the gate's decision on it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import insert, select, update

from optimizer.store import schema
from optimizer.store._repository import Repository, decode, encode


@dataclass(frozen=True)
class ProposalRow:
    """A proposal as it is recorded: the columns of its row (`decision` and `usage` are stored as JSON)."""

    iteration_id: str
    ordinal: int
    agent: str
    branch: str
    proposer: str
    status: str
    reason: str
    rationale: str = ""
    diff: str = ""
    rollouts: int = 0
    usage: dict[str, Any] = field(default_factory=dict)
    patcher_model: str | None = None
    manual_sha256: str | None = None
    commit_sha: str | None = None
    candidate_run_id: str | None = None
    decision: dict[str, Any] | None = None


class Proposals(Repository):
    """A proposal is recorded once it is decided; only a better proposal of the same iteration
    changes it afterwards (`superseded`)."""

    def add(self, proposal: ProposalRow) -> int:
        """Record a proposal; returns its id."""
        values = encode(schema.proposals, asdict(proposal))
        with self._writing() as conn:
            return conn.execute(insert(schema.proposals).values(
                created_at=datetime.now(timezone.utc), **values)).inserted_primary_key[0]

    def set_status(self, proposal_id: int, status: str, reason: str) -> None:
        """A recorded proposal's new status and the reason for it."""
        with self._store.engine.begin() as conn:
            conn.execute(update(schema.proposals).where(schema.proposals.c.id == proposal_id)
                         .values(status=status, reason=reason))

    def rows(self, *, iteration_id: str | None = None, branch: str | None = None) -> list[dict[str, Any]]:
        """Proposals (of one iteration, or on one branch), oldest first, `decision` and `usage` decoded."""
        query = select(schema.proposals).order_by(schema.proposals.c.id)
        if iteration_id:
            query = query.where(schema.proposals.c.iteration_id == iteration_id)
        if branch:
            query = query.where(schema.proposals.c.branch == branch)
        with self._reading() as conn:
            return [decode(row) for row in conn.execute(query).mappings().all()]

    def rejected(self, agent: str | None = None) -> list[dict[str, Any]]:
        """Rejected proposals (of one agent, or all), oldest first, each with its iteration's
        targets and base commit."""
        proposals, iterations = schema.proposals, schema.iterations
        query = (select(proposals.c.id, proposals.c.iteration_id, proposals.c.status, proposals.c.reason,
                        proposals.c.rationale, proposals.c.diff, proposals.c.created_at, iterations.c.targets_json,
                        iterations.c.base_commit)
                 .join(iterations, iterations.c.iteration_id == proposals.c.iteration_id)
                 .where(proposals.c.status.like("rejected%"))
                 .order_by(proposals.c.id))
        if agent:
            query = query.where(proposals.c.agent == agent)
        with self._reading() as conn:
            return [decode(row) for row in conn.execute(query).mappings().all()]
