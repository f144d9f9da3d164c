"""The iterations table: one row per iteration of the loop, from its start to its verdict."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, insert, select

from optimizer.store import schema
from optimizer.store._repository import Repository, decode, encode

VERDICTS = ("accepted", "rejected", "nothing_to_fix")
"""Iteration statuses that are a verdict: the iteration ended on its own, not interrupted."""


class Iterations(Repository):
    """An iteration is written when it starts, when it has chosen what to fix, and when it ends."""

    def start(self, iteration_id: str, *, kind: str, base_commit: str, settings: dict[str, Any],
              base_ref: str | None = None) -> None:
        values = encode(schema.iterations, dict(iteration_id=iteration_id, kind=kind, base_ref=base_ref,
                                                base_commit=base_commit, targets=[], settings=settings))
        with self._writing() as conn:
            conn.execute(insert(schema.iterations).values(status="running", started_at=datetime.now(timezone.utc),
                                                          **values, **self._store.owned()))

    def set_targets(self, iteration_id: str, *, agent: str, targets: list[str], baseline_run_id: str | None,
                    request_path: str | None = None, manual_sha256: str | None = None) -> None:
        """What the iteration set out to fix: the agent, its `suite/bucket` targets, the baseline
        run they were read from and the request written for the proposer."""
        self._update_job(schema.iterations.c.iteration_id, iteration_id, dict(
            agent=agent, baseline_run_id=baseline_run_id, targets=targets, request_path=request_path,
            manual_sha256=manual_sha256))

    def finish(self, iteration_id: str, status: str, summary: dict[str, Any] | None = None, *,
               baseline_run_id: str | None = None) -> None:
        """The iteration's verdict (stamped `finished_at`), with its summary and its baseline run
        when given (a column not given keeps its value)."""
        values: dict[str, Any] = {"status": status}
        if baseline_run_id is not None:
            values["baseline_run_id"] = baseline_run_id
        if summary is not None:
            values["summary"] = summary
        self._update_job(schema.iterations.c.iteration_id, iteration_id, values)

    def get(self, iteration_id: str) -> dict[str, Any] | None:
        with self._reading() as conn:
            row = conn.execute(select(schema.iterations).where(schema.iterations.c.iteration_id == iteration_id)
                               ).mappings().first()
        return decode(row) if row else None

    def last_verdict(self, base_commit: str) -> datetime | None:
        """When the last iteration on `base_commit` that reached a verdict (accepted, rejected,
        nothing to fix) ended; None when none has."""
        table = schema.iterations
        with self._reading() as conn:
            return conn.execute(select(func.max(table.c.finished_at)).where(
                table.c.base_commit == base_commit,
                table.c.status.in_(VERDICTS))).scalar_one()

    def rejected_unproposed(self, base_commit: str) -> list[dict[str, Any]]:
        """Iterations on `base_commit` rejected without a proposal reaching the gate (a search
        that promoted nothing), oldest first, each with its targets and base commit: for
        `bucket_patience` they count as a rejected proposal."""
        iterations, proposals = schema.iterations, schema.proposals
        query = (select(iterations.c.iteration_id, iterations.c.targets_json, iterations.c.base_commit)
                 .where(iterations.c.base_commit == base_commit, iterations.c.status == "rejected",
                        ~select(proposals.c.id).where(proposals.c.iteration_id == iterations.c.iteration_id).exists())
                 .order_by(iterations.c.started_at))
        with self._reading() as conn:
            return [decode(row) for row in conn.execute(query).mappings().all()]

    def first_start(self, base_commit: str) -> datetime | None:
        """When the first iteration on `base_commit` started, whatever became of it."""
        table = schema.iterations
        with self._reading() as conn:
            return conn.execute(select(func.min(table.c.started_at)).where(
                table.c.base_commit == base_commit)).scalar_one()

    def interrupted_since_verdict(self, base_commit: str) -> list[dict[str, Any]]:
        """Iterations on `base_commit` interrupted (killed, Ctrl-C, a signal) after its last verdict,
        each with its id, owner columns and start: the runs their processes started, and the
        search budget they spent, belong to the iteration a resumed job runs in their place
        (`Runs.left_by`, `search.run_search`)."""
        table, since = schema.iterations, self.last_verdict(base_commit)
        query = select(table.c.iteration_id, table.c.owner_host, table.c.owner_pid, table.c.owner_start,
                       table.c.started_at).where(
            table.c.base_commit == base_commit, table.c.status == "interrupted", table.c.owner_start.is_not(None))
        if since is not None:
            query = query.where(table.c.started_at >= since)
        with self._reading() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def rows(self) -> list[dict[str, Any]]:
        """Every iteration, oldest first, its JSON columns decoded (`targets`, `settings`, `summary`)."""
        with self._reading() as conn:
            rows = conn.execute(select(schema.iterations).order_by(schema.iterations.c.started_at)).mappings().all()
        return [decode(row) for row in rows]
