"""What every table's repository shares: the store's engine and writer, and the JSON columns."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Column, Connection, Engine, Table, update

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


def encode(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values` as columns of `table`: a value named like a JSON column without its `_json`
    (`summary` for `summary_json`) goes into that column as JSON (a string as it is)."""
    columns = {}
    for key, value in values.items():
        if f"{key}_json" in table.c:
            key = f"{key}_json"
            if not isinstance(value, str) and value is not None:
                value = json.dumps(value, default=str, ensure_ascii=False)
        columns[key] = value
    return columns


def decode(row) -> dict[str, Any]:
    """A row as a dict whose JSON columns are decoded and named without `_json` (`summary`)."""
    record = dict(row)
    for key in list(record):
        if key.endswith("_json") and isinstance(record[key], str):
            record[key.removesuffix("_json")] = json.loads(record.pop(key))
    return record
