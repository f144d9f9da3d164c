"""The nightlies table: one row per nightly job, holding the state it resumes from."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import insert, select

from optimizer.store import schema
from optimizer.store._repository import Repository, decode, encode


class Nightlies(Repository):
    """A nightly job is written when it starts and saved after each iteration, so a killed job
    can be resumed from its last saved state."""

    def start(self, nightly_id: str, *, branch: str, base_ref: str, base_commit: str, settings: dict[str, Any],
              state: dict[str, Any]) -> None:
        """A running job on `branch`, whose tip is still `base_commit`."""
        values = encode(schema.nightlies, dict(nightly_id=nightly_id, branch=branch, base_ref=base_ref,
                                               base_commit=base_commit, tip_commit=base_commit, status="running",
                                               settings=settings, state=state))
        with self._writing() as conn:
            conn.execute(insert(schema.nightlies).values(started_at=datetime.now(timezone.utc), **values))

    def save(self, nightly_id: str, status: str, tip_commit: str, state: dict[str, Any]) -> None:
        """The job's status, branch tip and state; leaving `running` stamps `finished_at`."""
        self._update_job(schema.nightlies.c.nightly_id, nightly_id,
                         dict(status=status, tip_commit=tip_commit, state=state))

    def save_settings(self, nightly_id: str, settings: dict[str, Any]) -> None:
        """The settings a resumed job runs with from now on (its `--override`s, this machine's folders)."""
        self._update_job(schema.nightlies.c.nightly_id, nightly_id, dict(settings=settings))

    def get(self, nightly_id: str) -> dict[str, Any] | None:
        """One nightly job's row, its JSON columns decoded."""
        with self._reading() as conn:
            row = conn.execute(select(schema.nightlies).where(schema.nightlies.c.nightly_id == nightly_id)
                               ).mappings().first()
        return decode(row) if row is not None else None

    def rows(self) -> list[dict[str, Any]]:
        """Every nightly job, oldest first, its JSON columns decoded (`settings`, `state`)."""
        with self._reading() as conn:
            rows = conn.execute(select(schema.nightlies).order_by(schema.nightlies.c.started_at)).mappings().all()
        return [decode(row) for row in rows]
