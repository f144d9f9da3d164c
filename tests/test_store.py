"""The store: migrations from a blank database, recorded and versioned."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest
from sqlalchemy import select, update

from optimizer.errors import ConfigError
from optimizer.store import Store, default_url, schema
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION, table_names
from optimizer.types import GraderResult, RunResult, Trial


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
    store.close()
    assert Store(default_url(tmp_path)).get("k")["content"] == "hi"  # the first answer is the one stored


def _trial(index: int, graders: list[str]) -> Trial:
    return Trial(suite="s", task_id="t", bucket="b", split="train", index=index, status="passed", score=1.0,
                 duration_s=0.1, grader_results=[GraderResult(grader=name, score=1.0, passed=True,
                                                              rationale=f"{name} of trial {index}")
                                                 for name in graders])


@pytest.mark.parametrize("multi_row_returning", [True, False])
def test_trials_written_in_one_batch_keep_their_own_grader_results(tmp_path, multi_row_returning):
    """The writer stores a batch of trials with one statement; each trial's grader rows must
    point at that trial, also on a database that can only return ids row by row."""
    store = Store(default_url(tmp_path))
    store.engine.dialect.insert_executemany_returning_sort_by_parameter_order = multi_row_returning
    store.start_run(RunResult(run_id="r", started_at=datetime.now(timezone.utc), settings={}, fingerprints={}))
    trials = [_trial(0, ["a"]), _trial(1, []), _trial(2, ["a", "b"]), _trial(3, ["c"])]
    with store._lock:  # hold the writer back until every trial is queued, so they form one batch
        for trial in trials:
            store._queue.put(("trial", ("r", trial)))
        store._writer = threading.Thread(target=store._write_loop, daemon=True)
        store._writer.start()
    loaded = store.load_trials("r")
    assert [trial.index for trial in loaded] == [0, 1, 2, 3]
    assert [[result.rationale for result in trial.grader_results] for trial in loaded] == \
        [["a of trial 0"], [], ["a of trial 2", "b of trial 2"], ["c of trial 3"]]
