"""The response cache: a model's answer stored under the hash of its request (and trial number)."""

from __future__ import annotations

import json
import threading
from typing import Any

from sqlalchemy import select

from optimizer.store import schema
from optimizer.store._repository import Owner, Repository


class CachedResponses(Repository):
    """Entries are written by the store's background writer; until one is committed it is
    answered from memory. A miss costs no query: the stored keys are read once, then kept up to
    date. Reads never wait for the writer."""

    def __init__(self, store: Owner):
        super().__init__(store)
        self._pending: dict[str, dict[str, Any]] = {}
        self._keys: set[str] | None = None
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        pending = self._pending.get(key)
        if pending is not None:
            return pending
        if key not in self._stored_keys():
            return None
        return self._stored(key)

    def put(self, key: str, model: str, value: dict[str, Any]) -> None:
        self._pending.setdefault(key, value)
        if self._keys is not None:
            self._keys.add(key)
        self._store.enqueue("cache", (key, model, value))

    def written(self, key: str) -> None:
        """The writer is done with the entry under `key` (committed, or failed): read it from the database."""
        self._pending.pop(key, None)

    def _stored_keys(self) -> set[str]:
        """The keys of every cache entry, read from the database once, then kept up to date."""
        if self._keys is None:
            with self._lock, self._store.engine.connect() as conn:
                self._keys = set(conn.execute(select(schema.response_cache.c.key)).scalars())
        return self._keys

    def _stored(self, key: str) -> dict[str, Any] | None:
        """One stored cache entry, read from the database."""
        with self._store.engine.connect() as conn:
            row = conn.execute(select(schema.response_cache.c.value_json)
                               .where(schema.response_cache.c.key == key)).first()
        return json.loads(row[0]) if row else None
