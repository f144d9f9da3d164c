"""Run ownership: every running run and iteration names its process (host, pid, start stamp) and
carries a heartbeat; one whose owner is gone is closed as `interrupted` by the next command, one
whose owner is alive is never adopted. And a blank store opened by several processes at once.

Each store test runs on SQLite and on PostgreSQL (`store_url` in conftest.py)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import delete, inspect, select, update
from sqlalchemy.exc import OperationalError

from optimizer.errors import ConfigError
from optimizer.store import Store, open_store, schema
from optimizer.store import ownership
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION
from optimizer.store.ownership import OWNER_COLUMNS, LEASE_S, start_stamp, this_process
from optimizer.types import RunResult
from tests.conftest import PROJECT_ROOT
from tests.helpers import clean_context, run_forked
from tests.optimizer.store.test_store_integrity import _wait_for_trials, database, rows  # noqa: F401 - a fixture

SPEC = {"commit": "abc", "tasks": {"card/t": {"trials": 2}}}


@pytest.fixture
def other_process():
    """A live process of this machine that is not this one (the owner of another job)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield process
    process.kill()
    process.wait()


def owner_of(process: subprocess.Popen, host: str = ownership.HOST) -> dict:
    return {"owner_host": host, "owner_pid": process.pid, "owner_start": start_stamp(process.pid),
            "heartbeat_at": datetime.now(timezone.utc)}


def start_run(store: Store, run_id: str, kind: str = "baseline", **owner) -> None:
    store.runs.start(RunResult(run_id=run_id, started_at=datetime.now(timezone.utc), settings={},
                               fingerprints=SPEC), kind)
    if owner:
        with store.engine.begin() as conn:
            conn.execute(update(schema.runs).where(schema.runs.c.run_id == run_id).values(**owner))


def status(url: str, run_id: str) -> str:
    store = Store(url)
    try:
        return store.runs.get(run_id)["status"]
    finally:
        store.close()


def test_a_started_run_and_iteration_name_this_process_as_their_owner(store_url):
    store = Store(store_url)
    start_run(store, "r")
    store.iterations.start("i", kind="run", base_commit="abc", settings={})
    me = this_process()
    for row in (store.runs.get("r"), store.iterations.get("i")):
        assert {name: row[name] for name in me} == me and row["heartbeat_at"] is not None
    assert me["owner_start"] and me["owner_pid"] == os.getpid()


@pytest.mark.slow
def test_a_killed_eval_is_closed_as_interrupted_by_the_next_command(cli, database):
    optimizer = str(Path(sys.executable).parent / "optimizer")
    process = subprocess.Popen([optimizer, "eval", "--suite", "card_agent", "--agent-model", "mock/oracle@200ms",
                                "--trials", "20", "--concurrency", "2"], cwd=PROJECT_ROOT,
                               env={**os.environ, "OPTIMIZER_PLAIN": "1"}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        _wait_for_trials(database, process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    [(run_id, left)] = rows(database, "select run_id, status from runs")
    assert left == "running"  # nothing of the killed process could say otherwise

    code, out, err = cli("history")
    assert code == 0, out + err
    [(closed, summary)] = rows(database, "select status, summary_json from runs")
    assert closed == "interrupted"
    assert f"pid {process.pid}" in json.loads(summary)["stop_reason"]


def test_a_running_run_whose_owner_is_alive_is_never_adopted(store_url, other_process):
    store = Store(store_url)
    start_run(store, "theirs", **owner_of(other_process))
    store.close()

    store = Store(store_url)  # opening the store leaves a live owner's run alone
    assert store.runs.get("theirs")["status"] == "running"
    assert store.runs.adopt(SPEC, "baseline") is None

    other_process.kill()
    other_process.wait()
    assert store.runs.adopt(SPEC, "baseline") == "theirs"
    adopted = store.runs.get("theirs")
    assert adopted["status"] == "running" and adopted["owner_pid"] == os.getpid()
    assert Store(store_url).runs.adopt(SPEC, "baseline") is None  # now this live process's own


def _adopt(url: str, start, done, taken) -> None:
    """Adopt at the same moment as the others, and stay alive until they all tried: a process
    that has exited owns nothing, so its run may rightly be adopted again."""
    store = Store(url)
    start.wait()
    taken.put(store.runs.adopt(SPEC, "baseline"))
    done.wait()
    store.close()


def test_processes_adopting_one_interrupted_run_at_once_get_it_once(store_url):
    store = Store(store_url)
    start_run(store, "left")
    store.runs.finish("left", "interrupted", {})
    store.close()
    context = clean_context()
    count = 3
    start, done, taken = context.Barrier(count), context.Barrier(count), context.Queue()
    assert run_forked(context, _adopt, [(store_url, start, done, taken)] * count) == [0] * count
    results = [taken.get(timeout=10) for _ in range(count)]
    assert results.count("left") == 1 and results.count(None) == count - 1, results


def test_a_second_run_at_the_same_settings_leaves_a_live_jobs_baseline_alone(cli, repo, tmp_path, database,
                                                                            other_process):
    """Two people at one commit on one store: the second must not take over the first's running
    baseline (it then failed on the trials both recorded: UNIQUE constraint failed)."""
    code, out, err = cli("run", "--dry-run", "--json", str(tmp_path / "first.json"))
    assert code == 0, out + err
    first = json.loads((tmp_path / "first.json").read_text())["baseline_run_id"]
    store = Store(database)
    with store.engine.begin() as conn:  # the first job's baseline, still running in the other process
        conn.execute(update(schema.runs).where(schema.runs.c.run_id == first)
                     .values(status="running", finished_at=None, **owner_of(other_process)))
    recorded = len(store.trials.load(first))
    store.close()

    code, out, err = cli("run", "--dry-run", "--json", str(tmp_path / "second.json"))
    assert code == 0, out + err
    second = json.loads((tmp_path / "second.json").read_text())["baseline_run_id"]
    assert second != first
    store = Store(database)
    theirs = store.runs.get(first)
    assert theirs["status"] == "running" and theirs["owner_pid"] == other_process.pid
    assert len(store.trials.load(first)) == recorded


def test_a_reused_pid_is_not_taken_for_the_owner(store_url):
    store = Store(store_url)
    reused = {**this_process(), "owner_start": f"{ownership.MACHINE}/1"}  # this pid, another process's start
    start_run(store, "r", **reused)
    store.close()
    assert status(store_url, "r") == "interrupted"


def test_another_machines_run_and_iteration_are_closed_once_their_heartbeat_is_older_than_the_lease(store_url):
    store = Store(store_url)
    fresh = {"owner_host": "elsewhere", "owner_pid": 1, "owner_start": "their-boot/pid:[1]/7",
             "heartbeat_at": datetime.now(timezone.utc) - timedelta(seconds=LEASE_S / 2)}
    stale = {**fresh, "heartbeat_at": datetime.now(timezone.utc) - timedelta(seconds=LEASE_S * 2)}
    start_run(store, "fresh", **fresh)
    start_run(store, "stale", **stale)
    for iteration_id, owner in (("fresh", fresh), ("stale", stale)):
        store.iterations.start(iteration_id, kind="run", base_commit="abc", settings={})
        with store.engine.begin() as conn:
            conn.execute(update(schema.iterations).where(schema.iterations.c.iteration_id == iteration_id)
                         .values(**owner))
    store.close()

    store = Store(store_url)
    assert [store.runs.get(key)["status"] for key in ("fresh", "stale")] == ["running", "interrupted"]
    assert [store.iterations.get(key)["status"] for key in ("fresh", "stale")] == ["running", "interrupted"]
    assert "pid 1 on elsewhere" in store.iterations.get("stale")["summary"]["stop_reason"]


def test_the_heartbeat_stamps_the_running_rows_of_this_process_only(store_url, monkeypatch):
    monkeypatch.setattr(ownership, "HEARTBEAT_S", 0.05)
    store = Store(store_url)
    long_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    start_run(store, "mine", heartbeat_at=long_ago)
    start_run(store, "theirs", owner_host="elsewhere", owner_pid=1, owner_start="x", heartbeat_at=long_ago)
    started = datetime.now(timezone.utc)
    time.sleep(0.5)
    store.close()
    store = Store(store_url)
    beats = {run_id: store.runs.get(run_id)["heartbeat_at"].replace(tzinfo=timezone.utc)  # UTC, zone or not
             for run_id in ("mine", "theirs")}
    assert beats["mine"] >= started - timedelta(seconds=1)  # stamped while it slept (a loaded machine may be slow after)
    assert beats["theirs"] == long_ago


def _as_the_previous_release_left_it(url: str) -> None:
    """A store as the four earlier migrations made it: no owner columns, no 0005 record."""
    store = Store(url)
    start_run(store, "old")
    store.close()
    store = Store(url)
    with store.engine.begin() as conn:
        for table in (schema.runs, schema.iterations):
            for name in OWNER_COLUMNS:
                conn.exec_driver_sql(f"ALTER TABLE {table.name} DROP COLUMN {name}")
        conn.execute(delete(schema.schema_migrations).where(schema.schema_migrations.c.name == "0005_run_owners"))
        conn.execute(update(schema.schema_version).values(version=4))
    store.engine.dispose()


def test_a_store_of_the_previous_release_gets_the_owner_columns_and_keeps_its_runs(store_url):
    _as_the_previous_release_left_it(store_url)
    store = Store(store_url)
    with store.engine.connect() as conn:
        columns = {table: {column["name"] for column in inspect(conn).get_columns(table)}
                   for table in ("runs", "iterations")}
        applied = list(conn.execute(select(schema.schema_migrations.c.name)).scalars())
        version = conn.execute(select(schema.schema_version.c.version)).scalar_one()
    assert all(set(OWNER_COLUMNS) <= names for names in columns.values())
    assert sorted(applied) == [name for name, _ in MIGRATIONS] and version == SCHEMA_VERSION
    old = store.runs.get("old")
    assert old["status"] == "running" and old["owner_pid"] is None  # recent: judged by its start, as another host's
    start_run(store, "new")
    assert store.runs.get("new")["owner_pid"] == os.getpid()


def _open_blank(url: str, start) -> None:
    start.wait()
    Store(url).close()


@pytest.mark.slow
def test_processes_opening_a_blank_sqlite_store_at_once_all_succeed(tmp_path):
    """Commands started side by side on a fresh state folder take turns migrating it. The
    processes are spawned, as commands are: a fork of this test process would inherit the locks
    its other threads (earlier tests' heartbeats) happen to hold, and wait on them forever."""
    context = multiprocessing.get_context("spawn")
    count = 3
    for attempt in range(5):
        url = f"sqlite:///{tmp_path / str(attempt) / 'optimizer.db'}"
        start = context.Barrier(count)
        assert run_forked(context, _open_blank, [(url, start)] * count) == [0] * count, f"attempt {attempt}"
        store = Store(url)
        with store.engine.connect() as conn:
            applied = list(conn.execute(select(schema.schema_migrations.c.name)).scalars())
        assert sorted(applied) == [name for name, _ in MIGRATIONS]


def test_a_store_that_fails_once_open_is_not_blamed_on_its_folder(tmp_path, monkeypatch):
    from optimizer.settings.loading import load_settings

    def fails(conn):
        raise OperationalError("CREATE TABLE runs", {}, Exception("table runs already exists"))

    monkeypatch.setattr("optimizer.store.store.migrate", fails)
    with pytest.raises(ConfigError) as raised:
        open_store(load_settings(PROJECT_ROOT), tmp_path)
    assert "table runs already exists" in str(raised.value)
    assert "writable folder" not in raised.value.fix and "run the command again" in raised.value.fix


@pytest.mark.skipif(ownership.MACHINE is None, reason="needs /proc")
def test_a_process_named_with_spaces_and_parentheses_is_read_alike_by_ownership_and_the_reaper():
    from optimizer import procfs
    from optimizer.nightly import reaper

    rename = "open('/proc/self/comm', 'w').write('x) (1 2 Z'); import time; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", rename])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != "x) (1 2 Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        fields = procfs.stat_fields(child.pid)
        assert fields[0] in "RS" and int(fields[1]) == os.getpid()
        assert start_stamp(child.pid) == f"{ownership.MACHINE}/{fields[19]}"
        seen = reaper._processes()[child.pid]
        assert (seen.parent, seen.exited) == (os.getpid(), False)
    finally:
        child.kill()
        child.wait()
    assert procfs.stat_fields(child.pid) is None and start_stamp(child.pid) is None
