"""The store: migrations from a blank database, recorded and versioned."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from optimizer.errors import ConfigError
from optimizer.store import Store, default_url, schema
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION, table_names


def test_blank_database_gets_every_table_and_the_schema_version(tmp_path):
    store = Store(default_url(tmp_path))
    with store.engine.connect() as conn:
        assert {"runs", "trials", "grader_results", "response_cache", "schema_version"} <= table_names(conn)
        applied = list(conn.execute(select(schema.schema_migrations.c.name)).scalars())
        version = conn.execute(select(schema.schema_version.c.version)).scalar()
    assert applied == [name for name, _ in MIGRATIONS]
    assert version == SCHEMA_VERSION


def test_reopening_applies_nothing_twice(tmp_path):
    Store(default_url(tmp_path)).close()
    store = Store(default_url(tmp_path))
    with store.engine.connect() as conn:
        assert len(list(conn.execute(select(schema.schema_migrations.c.name)))) == len(MIGRATIONS)


def test_a_store_written_by_a_newer_version_is_refused(tmp_path):
    store = Store(default_url(tmp_path))
    with store.engine.begin() as conn:
        conn.execute(update(schema.schema_version).values(version=SCHEMA_VERSION + 1))
    store.close()
    with pytest.raises(ConfigError, match="newer"):
        Store(default_url(tmp_path))


def test_response_cache_round_trip_and_duplicate_put(tmp_path):
    store = Store(default_url(tmp_path))
    assert store.get("k") is None
    store.put("k", "mock/sim", {"content": "hi", "tool_calls": [], "usage": {}})
    store.put("k", "mock/sim", {"content": "other", "tool_calls": [], "usage": {}})
    assert store.get("k")["content"] == "hi"
