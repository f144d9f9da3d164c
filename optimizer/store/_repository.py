"""What every table's repository shares: the store's engine and writer, and the JSON columns."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Column, Connection, Engine, update

from optimizer.store.columns import decode, encode

__all__ = ["Owner", "Repository", "decode", "encode"]

if TYPE_CHECKING:  # `frame` imports pandas when called, so opening a store stays cheap
    import pandas as pd


class Owner(Protocol):
    """What a repository uses of the `Store` that owns it."""

    engine: Engine

    def flush(self) -> None:
        """Wait until every queued record is committed."""

    def enqueue(self, kind: str, payload: Any) -> None:
        """Queue a record for the background writer."""

    def owned(self) -> dict[str, Any]:
        """The owner columns of a row this process starts running (see `optimizer.store.ownership`)."""


class Repository:
    """The reads and writes of one table (with its child tables), through the engine and the
    background writer of the `Store` that owns it. A read first flushes the writer, so it sees
    every record queued before it."""

    def __init__(self, store: Owner):
        self._store = store

    def _reading(self) -> Connection:
        self._store.flush()
        return self._store.engine.connect()

    def _writing(self):
        """A transaction, begun once every queued record is committed."""
        self._store.flush()
        return self._store.engine.begin()

    def _frame(self, query) -> pd.DataFrame:
        """A query's rows as a DataFrame; pandas is imported here, on the first table asked for."""
        import pandas as pd

        with self._reading() as conn:
            return pd.read_sql(query, conn)

    def _update_job(self, key: Column, value: str, values: dict[str, Any]) -> None:
        """Update one iteration or nightly row; leaving `running` stamps `finished_at`."""
        self._store.flush()
        if values.get("status") and values["status"] != "running":
            values.setdefault("finished_at", datetime.now(timezone.utc))
        with self._store.engine.begin() as conn:
            conn.execute(update(key.table).where(key == value).values(**encode(key.table, values)))
