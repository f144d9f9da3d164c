"""Store integrity: a corrupt store is refused, a database fault stops the run (exit 3, never an
agent error), a run that ends early says how, and the oldest store opens with today's code.

Each test runs on SQLite and on PostgreSQL (`store_url` in conftest.py); the damaged-page tests
are SQLite's own and are skipped on PostgreSQL with the reason."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DatabaseError
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

from optimizer.errors import StoreError
from optimizer.ledger import BudgetExceeded
from optimizer.store import Store, default_url, schema
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION
from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT
from tests.helpers import FACT_RULE, after_data_line, script, stopped_by

EVAL = ("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--trials", "2")
FIX = "from a backup, or move it aside"
KEPT = "trials already recorded are kept"
SQLITE_PAGES = ("damaged pages and `PRAGMA quick_check` are SQLite's; a PostgreSQL server checks its own pages "
                "and reports damage as the error of a query, tested below as any database error")


@pytest.fixture
def database(store_url, isolated, monkeypatch) -> str:
    """The store the CLI and `open_store` use in this test: SQLite in the state folder (the
    default), or a blank PostgreSQL database, set through OPTIMIZER_DATABASE_URL."""
    if store_url.startswith("sqlite"):
        return default_url(isolated)
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", store_url)
    return store_url


def sqlite_only(url: str) -> None:
    if not url.startswith("sqlite"):
        pytest.skip(SQLITE_PAGES)


def rows(url: str, query: str) -> list[tuple]:
    """The rows of a query, read past the store (as a person inspecting it would)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query))]
    finally:
        engine.dispose()


def corrupt_pages(db: Path, last: int | None = None, seed: int = 7) -> None:
    """Fold the write-ahead log into the file, then write random bytes over every page but the
    first (the header stays, so SQLite opens the file and finds the damage in its pages), or
    over the `last` pages only."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    pages = len(data) // page_size
    rng = random.Random(seed)
    for page in range(pages - last if last else 1, pages):
        data[page * page_size:page * page_size + page_size // 2] = rng.randbytes(page_size // 2)
    db.write_bytes(bytes(data))


def trials_in(url: str) -> list[tuple[str, str | None]]:
    return rows(url, "select status, error from trials")


def test_eval_on_a_store_with_corrupted_pages_exits_3_with_the_fix(cli, isolated, database):
    sqlite_only(database)
    code, out, err = cli(*EVAL)
    assert code == 0, out + err
    db = isolated / "optimizer.db"
    corrupt_pages(db)
    damaged = db.read_bytes()

    code, out, err = cli(*EVAL)

    assert code == 3, out + err
    assert "optimizer.db" in err and "corrupt" in err and FIX in err, err
    assert "OPTIMIZER_STATE_DIR" in err  # the other way out: a store elsewhere
    assert "agent crashed" not in out + err and "errored" not in out
    assert db.read_bytes() == damaged, "nothing may be written to a corrupt store"


def test_damage_only_in_pages_that_opening_never_reads_is_found_by_the_quick_check(tmp_path, store_url):
    sqlite_only(store_url)
    store = Store(default_url(tmp_path))
    for number in range(50):
        store.cache.put(f"key {number}", "mock/sim", {"content": "x" * 3000})
    store.close()
    corrupt_pages(tmp_path / "optimizer.db", last=5)  # cache entries only: the migrations still run

    with pytest.raises(StoreError, match="corrupt") as raised:
        Store(default_url(tmp_path))
    assert str(tmp_path / "optimizer.db") in str(raised.value) and FIX in str(raised.value)


FAULTS = {
    "sqlite": (SQLiteDialect_pysqlite, sqlite3.DatabaseError("database disk image is malformed"), FIX),
    "postgresql": (PGDialect_psycopg, psycopg.OperationalError("server closed the connection unexpectedly"), KEPT),
}
"""Per database: the dialect whose statements fail, the driver's error, and the fix it must show."""


def test_a_database_error_in_the_cache_lookup_stops_the_run_with_exit_3(cli, database, monkeypatch):
    """The trials read the response cache inside the agent's model calls: a fault there is the
    store's, so the run stops with the fix instead of recording agent crashes."""
    dialect, fault, fix = FAULTS["sqlite" if database.startswith("sqlite") else "postgresql"]
    execute = dialect.do_execute

    def failing_cache_reads(self, cursor, statement, parameters, context=None):
        if statement.lstrip().upper().startswith("SELECT") and "FROM response_cache" in statement:
            raise fault
        return execute(self, cursor, statement, parameters, context)

    monkeypatch.setattr(dialect, "do_execute", failing_cache_reads)
    code, out, err = cli(*EVAL)
    monkeypatch.setattr(dialect, "do_execute", execute)

    assert code == 3, out + err
    assert str(fault) in err and fix in err, err
    assert "agent crashed" not in out + err
    assert [status for status, _ in trials_in(database)].count("errored") == 0
    [(status, summary)] = rows(database, "select status, summary_json from runs")
    assert status == "crashed"
    assert json.loads(summary)["stop_reason"].startswith("StoreError:")


def test_a_failed_write_stops_the_run_at_its_next_record(store_url):
    """The writer commits in the background; its failure is raised, as a StoreError, to whoever
    records next rather than only when the run ends."""
    store = Store(store_url)
    store.trials.record("no-such-run", _trial(0))  # the trial's run is not in the store: refused
    store._queue.join()  # the writer has tried and failed

    with pytest.raises(StoreError, match="(?i)foreign key constraint") as raised:
        store.trials.record("no-such-run", _trial(1))
    assert KEPT in str(raised.value)
    store.close()  # raised once, to the recorder, not again


def _trial(index: int) -> Trial:
    return Trial(suite="s", task_id="t", bucket="b", split="train", index=index, status="passed", score=1.0,
                 duration_s=0.1)


def _wait_for_trials(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until the subprocess's run has recorded a trial (it has started for real)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if not url.startswith("sqlite:///") or Path(url.removeprefix("sqlite:///")).exists():
            try:
                if trials_in(url):
                    return
            except DatabaseError:  # the tables are still being made
                pass
        time.sleep(0.2)
    raise AssertionError("the eval recorded no trial in time")


@pytest.mark.parametrize("stop, code, reason", [
    (signal.SIGINT, 130, "KeyboardInterrupt"), (signal.SIGTERM, 143, "SIGTERM"), (signal.SIGHUP, 129, "SIGHUP"),
], ids=["ctrl-c", "sigterm", "sighup"])
@pytest.mark.slow
def test_ctrl_c_sigterm_or_sighup_in_eval_leaves_the_run_interrupted_not_running(database, stop, code, reason):
    eval_args = ["eval", "--suite", "card_agent", "--agent-model", "mock/oracle@200ms", "--trials", "20",
                 "--concurrency", "2"]
    exit_code, err = stopped_by(stop, eval_args, PROJECT_ROOT, lambda process: _wait_for_trials(database, process))
    assert exit_code == code, err
    runs = rows(database, "select status, summary_json from runs")
    assert [status for status, _ in runs] == ["interrupted"], runs
    assert json.loads(runs[0][1])["stop_reason"] == f"{reason}: the process was asked to stop"
    assert len(trials_in(database)) < 60  # it stopped before the end


def test_a_run_stopped_by_a_budget_is_stopped_with_the_reason(database):
    from optimizer.trials import evaluate
    from optimizer.settings.loading import load_settings
    from optimizer.ledger import Budget, BudgetExceeded, Ledger, charging
    from optimizer.store import open_store

    settings = load_settings(PROJECT_ROOT, {"agent_model": "mock/sim", "trials": 1})
    store = open_store(settings, PROJECT_ROOT)
    with pytest.raises(BudgetExceeded), charging(Ledger(store, budget=Budget(tokens=1))):
        evaluate.execute(evaluate.prepare(settings.evaluation, PROJECT_ROOT, ["card_agent"]), store)

    [run] = store.runs.frame().to_dict("records")
    assert run["status"] == "stopped"
    assert json.loads(run["summary_json"])["stop_reason"].startswith("budget: a model call")
    assert store.count("trials") == 0  # a trial the budget stopped is no result


@pytest.mark.parametrize("ending, status, reason", [
    (BudgetExceeded("a model call would pass the job's budget"), "stopped", "budget: a model call"),
    (KeyboardInterrupt(), "interrupted", "KeyboardInterrupt"),
])
def test_an_iteration_that_ends_early_says_how(repo, tmp_path, monkeypatch, database, ending, status, reason):
    from optimizer.loop import candidate
    from optimizer.loop import iteration as loop
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    settings = load_settings(repo)

    def ended(*args, **kwargs):
        raise ending

    monkeypatch.setattr(candidate, "compare", ended)
    store = open_store(settings, repo)
    with pytest.raises(type(ending)):
        loop.run_iteration(loop.LoopContext(settings=settings.parts, project_root=repo, store=store, log=lambda m: None))
    iteration = store.iterations.rows()[-1]
    assert iteration["status"] == status and iteration["finished_at"] is not None
    assert iteration["summary"]["stop_reason"].startswith(reason)


OLDEST_SCHEMA = """
CREATE TABLE schema_migrations (name VARCHAR NOT NULL, applied_at DATETIME NOT NULL, PRIMARY KEY (name));
CREATE TABLE schema_version (id INTEGER NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (id));
CREATE TABLE runs (
    run_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, status VARCHAR NOT NULL, started_at DATETIME NOT NULL,
    finished_at DATETIME, settings_json TEXT NOT NULL, fingerprints_json TEXT NOT NULL, summary_json TEXT,
    PRIMARY KEY (run_id));
CREATE TABLE response_cache (
    "key" VARCHAR NOT NULL, model VARCHAR NOT NULL, value_json TEXT NOT NULL, created_at DATETIME NOT NULL,
    PRIMARY KEY ("key"));
CREATE TABLE trials (
    id INTEGER NOT NULL, run_id VARCHAR NOT NULL, suite VARCHAR NOT NULL, task_id VARCHAR NOT NULL,
    bucket VARCHAR NOT NULL, split VARCHAR NOT NULL, trial_index INTEGER NOT NULL, status VARCHAR NOT NULL,
    score FLOAT, error TEXT, duration_s FLOAT NOT NULL, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, cost_usd FLOAT NOT NULL, model_calls INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL, transcript_json TEXT NOT NULL, outcome_json TEXT NOT NULL,
    PRIMARY KEY (id), UNIQUE (run_id, suite, task_id, trial_index), FOREIGN KEY(run_id) REFERENCES runs (run_id));
CREATE INDEX ix_trials_run_id ON trials (run_id);
CREATE TABLE grader_results (
    id INTEGER NOT NULL, trial_id INTEGER NOT NULL, grader VARCHAR NOT NULL, score FLOAT,
    passed BOOLEAN NOT NULL, errored BOOLEAN NOT NULL, rationale TEXT NOT NULL, details_json TEXT NOT NULL,
    PRIMARY KEY (id), FOREIGN KEY(trial_id) REFERENCES trials (id));
CREATE INDEX ix_grader_results_trial_id ON grader_results (trial_id);
INSERT INTO schema_migrations VALUES ('0001_initial', '2026-05-01 09:00:00.000000');
INSERT INTO schema_version VALUES (1, 1);
INSERT INTO runs VALUES ('20260501-090000-abcdef', 'eval', 'completed', '2026-05-01 09:00:00.000000',
    '2026-05-01 09:01:00.000000', '{"agent_model": "mock/sim"}', '{"seed": 0}', '{"totals": {"trials": 1}}');
INSERT INTO trials VALUES (1, '20260501-090000-abcdef', 'card_agent', 'card_event_standup', 'template_event',
    'train', 0, 'passed', 1.0, NULL, 0.5, 10, 5, 0.0, 1, 0,
    '{"messages": [{"role": "user", "content": "Standup Thursday 10:30"}]}', '{}');
INSERT INTO grader_results VALUES (1, 1, 'card_completion', 1.0, TRUE, FALSE, 'a card was saved', '{}');
INSERT INTO response_cache VALUES ('k', 'mock/sim', '{"content": "hi"}', '2026-05-01 09:00:00.000000');
"""
"""The store as the first release (migration 0001_initial only) left it, written out rather than
made with today's table definitions, with a run, a graded trial and a cache entry."""




def postgresql_script(script: str) -> str:
    """The oldest store as the same release made it on PostgreSQL: its own types, ids drawn from
    a sequence (moved past the rows written out with their ids)."""
    script = script.replace("DATETIME", "TIMESTAMP WITH TIME ZONE").replace("id INTEGER NOT NULL", "id SERIAL NOT NULL")
    return script + "".join(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}));\n"
                            for table in ("trials", "grader_results"))


def test_the_oldest_store_opens_with_every_later_migration_and_its_rows_intact(store_url):
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            conn.executescript(OLDEST_SCHEMA)
    else:
        engine = create_engine(store_url)
        with engine.begin() as conn:
            conn.exec_driver_sql(postgresql_script(OLDEST_SCHEMA))
        engine.dispose()

    store = Store(store_url)

    with store.engine.connect() as conn:
        applied = list(conn.execute(select(schema.schema_migrations.c.name)
                                    .order_by(schema.schema_migrations.c.applied_at)).scalars())
        version = conn.execute(select(schema.schema_version.c.version)).scalar_one()
    assert applied == [name for name, _ in MIGRATIONS] and version == SCHEMA_VERSION
    run = store.runs.get("20260501-090000-abcdef")
    assert run["status"] == "completed" and run["settings"] == {"agent_model": "mock/sim"}
    [trial] = store.trials.load("20260501-090000-abcdef")
    assert (trial.task_id, trial.status, trial.score) == ("card_event_standup", "passed", 1.0)
    assert trial.transcript.messages[0]["content"] == "Standup Thursday 10:30"
    assert [(g.grader, g.passed) for g in trial.grader_results] == [("card_completion", True)]
    assert store.cache.get("k") == {"content": "hi"}
    store.iterations.start("i1", kind="run", base_commit="abc", settings={})
    assert store.iterations.get("i1")["status"] == "running"  # the tables of later migrations work
    store.trials.record("20260501-090000-abcdef", _trial(1))
    assert [trial.index for trial in store.trials.load("20260501-090000-abcdef")] == [0, 1]  # new ids, after the old
