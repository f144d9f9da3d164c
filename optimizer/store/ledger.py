"""The ledger table: a row per settled model call, with its tokens and cost."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from sqlalchemy import func, select

from optimizer.ledger import LedgerEntry
from optimizer.store import schema
from optimizer.store._repository import Repository

Scope = Literal["run_id", "iteration_id", "nightly_id"]
"""A column the ledger's rows are filed under."""


class LedgerEntries(Repository):
    """Entries are written by the store's background writer, with the trials of the same moment."""

    def record(self, entry: LedgerEntry) -> None:
        self._store.enqueue("ledger", (asdict(entry),))

    def total(self, *, run_id: str | None = None, iteration_id: str | None = None,
              nightly_id: str | None = None) -> tuple[float, int]:
        """(cost, tokens) of the entries filed under every id given (all entries without one)."""
        table = schema.ledger
        query = select(func.coalesce(func.sum(table.c.cost_usd), 0.0),
                       func.coalesce(func.sum(table.c.prompt_tokens + table.c.completion_tokens), 0))
        for column, value in (("run_id", run_id), ("iteration_id", iteration_id), ("nightly_id", nightly_id)):
            if value is not None:
                query = query.where(table.c[column] == value)
        with self._reading() as conn:
            cost, tokens = conn.execute(query).one()
        return float(cost), int(tokens)

    def sums(self, key: Scope | None = None) -> list[dict[str, Any]]:
        """The ledger summed in the database per role, and per `key` (e.g. `iteration_id`) when
        given: rows of `key` (None without one), `role`, `cost_usd`, `tokens` (prompt +
        completion) and `calls`. Plain rows for readers that must stay quick (`optimizer
        history`): the ledger holds a row per model call."""
        table = schema.ledger
        groups = [table.c[key], table.c.role] if key else [table.c.role]
        query = (select(*([table.c[key].label("key")] if key else []), table.c.role,
                        func.sum(table.c.cost_usd).label("cost_usd"),
                        func.sum(table.c.prompt_tokens + table.c.completion_tokens).label("tokens"),
                        func.sum(table.c.calls).label("calls"))
                 .group_by(*groups).order_by(*groups))
        with self._reading() as conn:
            return [{"key": None, **row} for row in conn.execute(query).mappings().all()]
