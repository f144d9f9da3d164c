"""The store: migrations from a blank database, recorded and versioned; writes from several
processes at once. Each test runs on SQLite and on PostgreSQL (`store_url` in conftest.py)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest
from sqlalchemy import select, update

from optimizer.errors import ConfigError
from optimizer.store import Store, schema
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION, table_names
from optimizer.types import GraderResult, RunResult, Trial
from tests.helpers import clean_context, run_forked


def test_blank_database_gets_every_table_and_the_schema_version(store_url):
    store = Store(store_url)
    with store.engine.connect() as conn:
        assert {"runs", "trials", "grader_results", "response_cache", "schema_version"} <= table_names(conn)
        applied = list(conn.execute(select(schema.schema_migrations.c.name)).scalars())
        version = conn.execute(select(schema.schema_version.c.version)).scalar()
    assert applied == [name for name, _ in MIGRATIONS]
    assert version == SCHEMA_VERSION


def test_reopening_applies_nothing_twice(store_url):
    Store(store_url).close()
    store = Store(store_url)
    with store.engine.connect() as conn:
        assert len(list(conn.execute(select(schema.schema_migrations.c.name)))) == len(MIGRATIONS)


def test_a_store_written_by_a_newer_version_is_refused(store_url):
    store = Store(store_url)
    with store.engine.begin() as conn:
        conn.execute(update(schema.schema_version).values(version=SCHEMA_VERSION + 1))
    store.close()
    with pytest.raises(ConfigError, match="newer"):
        Store(store_url)


def test_response_cache_round_trip_and_duplicate_put(store_url):
    store = Store(store_url)
    assert store.cache.get("k") is None
    store.cache.put("k", "mock/sim", {"content": "hi", "tool_calls": [], "usage": {}})
    store.cache.put("k", "mock/sim", {"content": "other", "tool_calls": [], "usage": {}})
    assert store.cache.get("k")["content"] == "hi"
    store.close()
    assert Store(store_url).cache.get("k")["content"] == "hi"  # the first answer is the one stored


def _trial(index: int, graders: list[str], task_id: str = "t") -> Trial:
    return Trial(suite="s", task_id=task_id, bucket="b", split="train", index=index, status="passed", score=1.0,
                 duration_s=0.1, grader_results=[GraderResult(grader=name, score=1.0, passed=True,
                                                              rationale=f"{name} of trial {index}")
                                                 for name in graders])


@pytest.mark.parametrize("multi_row_returning", [True, False])
def test_trials_written_in_one_batch_keep_their_own_grader_results(store_url, multi_row_returning):
    """The writer stores a batch of trials with one statement; each trial's grader rows must
    point at that trial, also on a database that can only return ids row by row."""
    store = Store(store_url)
    store.engine.dialect.insert_executemany_returning_sort_by_parameter_order = multi_row_returning
    store.runs.start(RunResult(run_id="r", started_at=datetime.now(timezone.utc), settings={}, fingerprints={}))
    trials = [_trial(0, ["a"]), _trial(1, []), _trial(2, ["a", "b"]), _trial(3, ["c"])]
    with store._lock:  # hold the writer back until every trial is queued, so they form one batch
        for trial in trials:
            store._queue.put(("trial", ("r", trial)))
        store._writer = threading.Thread(target=store._write_loop, daemon=True)
        store._writer.start()
    loaded = store.trials.load("r")
    assert [trial.index for trial in loaded] == [0, 1, 2, 3]
    assert [[result.rationale for result in trial.grader_results] for trial in loaded] == \
        [["a of trial 0"], [], ["a of trial 2", "b of trial 2"], ["c of trial 3"]]


WRITERS = 2
TRIALS_EACH = 120


def _write_trials(url: str, writer: int, start) -> None:
    """One process of several recording trials of one run, and the same cache entries, at once;
    a commit every few trials so that the processes' transactions interleave."""
    store = Store(url)
    start.wait()
    for index in range(TRIALS_EACH):
        store.trials.record("r", _trial(index, [f"writer {writer}"], task_id=f"t{writer}"))
        store.cache.put(f"key {index}", "mock/sim", {"content": f"writer {writer}"})
        if index % 8 == 7:
            store.flush()
    store.close()


def test_processes_writing_trials_to_one_run_at_once_lose_nothing(store_url):
    store = Store(store_url)
    store.runs.start(RunResult(run_id="r", started_at=datetime.now(timezone.utc), settings={}, fingerprints={}))
    store.close()  # nothing of the parent's connections goes into the forked writers
    context = clean_context()
    start = context.Barrier(WRITERS)
    exits = run_forked(context, _write_trials, [(store_url, writer, start) for writer in range(WRITERS)])
    assert exits == [0] * WRITERS

    store = Store(store_url)
    trials = store.trials.load("r")
    assert sorted((trial.task_id, trial.index) for trial in trials) == \
        sorted((f"t{writer}", index) for writer in range(WRITERS) for index in range(TRIALS_EACH))
    assert all([result.grader for result in trial.grader_results] == [f"writer {trial.task_id[1:]}"]
               for trial in trials)
    assert store.count("response_cache") == TRIALS_EACH  # a key the other process stored first is kept, not an error
    assert store.cache.get("key 0")["content"] in {f"writer {writer}" for writer in range(WRITERS)}


def _open(url: str, start, opened) -> None:
    start.wait()
    Store(url).close()
    opened.put("opened")


def test_processes_opening_a_blank_postgresql_store_at_once_migrate_it_once(postgres_url):
    """Jobs of a team may start together on a new server database: they take turns migrating."""
    context = clean_context()
    count = 4
    start, opened = context.Barrier(count), context.Queue()
    assert run_forked(context, _open, [(postgres_url, start, opened)] * count) == [0] * count
    store = Store(postgres_url)
    with store.engine.connect() as conn:
        assert list(conn.execute(select(schema.schema_migrations.c.name)).scalars()) == [name for name, _ in MIGRATIONS]


def test_a_postgresql_server_that_dropped_the_pools_connections_is_reconnected_to(postgres_url):
    """As after a server restart between two calls: every connection the pool holds is dead."""
    import psycopg
    from sqlalchemy.engine import make_url

    store = Store(postgres_url)
    store.runs.start(RunResult(run_id="r1", started_at=datetime.now(timezone.utc)))
    url = make_url(postgres_url)
    with psycopg.connect(host=url.query["host"], port=int(url.query["port"]), user="postgres",
                         dbname=url.database, autocommit=True) as admin:
        ended = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = %s AND pid <> pg_backend_pid()", (url.database,)).fetchone()[0]
    assert ended >= 1  # the store's pooled connection was among them
    store.runs.start(RunResult(run_id="r2", started_at=datetime.now(timezone.utc)))
    assert {row["run_id"] for row in store.runs.rows("run_id")} == {"r1", "r2"}
    store.close()


def test_no_password_of_the_store_is_recorded_or_shown():
    """A record in a shared store is read by every role that can read it (the reviewers' read-only one)."""
    from optimizer.settings.config import Settings
    from optimizer.settings.night import owned
    from optimizer.store.address import without_password
    from optimizer.store.store import store_location

    url = "postgresql+psycopg://optimizer:secret@db.example:5432/optimizer"
    libpq = "postgresql+psycopg://optimizer@/optimizer?host=/run/pg&port=5432&password=secret"
    assert without_password(url) == "postgresql+psycopg://optimizer:***@db.example:5432/optimizer"
    assert without_password(libpq) == "postgresql+psycopg://optimizer@/optimizer?host=/run/pg&port=5432&password=***"
    assert without_password("sqlite:////srv/state/optimizer.db") == "sqlite:////srv/state/optimizer.db"
    assert without_password("postgresql://u@h/db") == "postgresql://u@h/db"
    settings = Settings(database_url=url)
    assert "secret" not in repr(settings.runner.record) and "secret" not in store_location(libpq)
    assert "secret" not in repr(owned(settings.parts.values, "repo-id", "/tmp"))
    assert settings.database_url == url  # what the process itself connects with
