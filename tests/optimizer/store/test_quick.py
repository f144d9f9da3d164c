"""`optimizer.store.quick`: a SQLite store read without SQLAlchemy gives `optimizer history` the
same tables as the `Store`, and every store it cannot read as it is goes to the `Store`."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine, update

from optimizer.reporting.history import load_history
from optimizer.store import Store, default_url, schema
from optimizer.store.migrations import migrate
from optimizer.store.quick import read_quickly
from tests.store_rows import add_iteration, add_nightly, add_run, ledger_entry


def filled_store(url: str) -> Store:
    """Runs of two kinds (one fully errored), two iterations with proposals, a nightly job, and
    ledger entries with and without an iteration, from several roles."""
    store = Store(url)
    baseline = add_run(store, "run-000001", "baseline", {"trivial_input": 0.5, "fact_preservation": 0.75}, 0)
    add_run(store, "run-000002", "eval", {"trivial_input": 0.75, "fact_preservation": None}, 1)
    add_run(store, "run-000003", "eval", {"trivial_input": None}, 2, status="errored")
    add_iteration(store, "it-1", baseline, ["card_agent/trivial_input"], "rejected",
                  [{"status": "rejected_gate"}, {"status": "rejected_lint"}])
    add_iteration(store, "it-2", baseline, ["card_agent/fact_preservation"], "accepted",
                  [{"status": "accepted", "candidate_run_id": "run-000002"}])
    add_nightly(store, "n-1", ["it-1", "it-2"], 1)
    for entry in (ledger_entry("agent", "it-1", 0.25, 100), ledger_entry("patcher", "it-1", 1.0, 50),
                  ledger_entry("judge", "it-2", 0.125, 7), ledger_entry("agent", None, 0.5, 10),
                  ledger_entry("embedder", "it-2", 2.0, 1)):
        store.ledger.record(entry)
    store.flush()
    return store


@pytest.mark.parametrize("limit", [20, 2, 1])
def test_the_history_read_without_sqlalchemy_is_the_one_read_through_the_store(tmp_path, limit):
    url = default_url(tmp_path)
    store = filled_store(url)
    expected = load_history(store, limit)
    store.close()
    quick = read_quickly(url, lambda reader: load_history(reader, limit))
    assert quick is not None, "an up-to-date SQLite store with nothing running is read quickly"
    assert quick == expected
    assert len(quick.iterations) == min(limit, 2) and quick.cost_by_role[0]["calls"] == 5


def test_a_store_it_cannot_read_as_it_is_is_left_to_the_store(tmp_path):
    reads = []

    def read(reader):
        reads.append(reader)
        return "read"

    assert read_quickly(default_url(tmp_path / "none"), read) is None  # no store yet: the Store makes it
    assert read_quickly("postgresql+psycopg://user@host/db", read) is None
    assert read_quickly("sqlite:///:memory:", read) is None

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "optimizer.db").write_bytes(b"not a database at all, " * 200)
    assert read_quickly(default_url(tmp_path / "junk"), read) is None  # the Store reports it as corrupt

    old = default_url(tmp_path / "old")
    (tmp_path / "old").mkdir()
    with create_engine(old).begin() as conn:
        migrate(conn, target=3)  # as an older release left it: the Store migrates it first
    assert read_quickly(old, read) is None

    url = default_url(tmp_path / "current")
    filled_store(url).close()
    assert read_quickly(url, read) == "read" and len(reads) == 1


@pytest.mark.parametrize("table, key", [("runs", "run-000002"), ("iterations", "it-2")])
def test_a_store_with_something_running_is_read_through_the_store_which_closes_what_is_gone(
        tmp_path, cli, isolated, table, key):
    """A run or an iteration left `running` by a process that is gone is shown as the Store
    leaves it, `interrupted`, and not as the file says."""
    url = default_url(isolated)
    store = filled_store(url)
    gone = {"status": "running", "owner_host": "elsewhere", "owner_pid": 1, "owner_start": "x",
            "heartbeat_at": datetime.now(timezone.utc) - timedelta(days=1)}
    column = getattr(schema, table).c.run_id if table == "runs" else schema.iterations.c.iteration_id
    with store.engine.begin() as conn:
        conn.execute(update(getattr(schema, table)).where(column == key).values(**gone))
    store.close()
    assert read_quickly(url, lambda reader: "read") is None

    code, out, err = cli("history", "--json", str(tmp_path / "history.json"))
    assert code == 0, out + err
    shown = json.loads((tmp_path / "history.json").read_text())
    assert [row["status"] for row in shown[table] if row[column.name] == key] == ["interrupted"]
    store = Store(url)
    row = store.runs.get(key) if table == "runs" else store.iterations.get(key)
    assert row["status"] == "interrupted"
    store.close()


def test_the_store_is_opened_read_only(tmp_path):
    url = default_url(tmp_path)
    filled_store(url).close()
    path = tmp_path / "optimizer.db"
    before = (path.stat().st_mtime_ns, path.read_bytes())

    def write(reader):
        reader.runs._conn.execute("DELETE FROM runs")
        return "deleted"

    assert read_quickly(url, write) is None  # sqlite3 refuses the write: read-only connection
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert read_quickly(url, lambda reader: len(reader.runs.rows("run_id"))) == 3


def test_the_store_address_read_without_the_settings_model_is_the_validated_one(tmp_path, monkeypatch):
    """`store_url_as_given` (history's fast path) finds the store where the validated settings
    do: the default, the file's `state_dir`, the environment over the file, `database_url` over
    both; a value that is no string is left to the validation (None)."""
    from optimizer.settings.loading import load_settings
    from optimizer.settings.sources import store_url_as_given
    from optimizer.store.address import store_url

    for variable in ("OPTIMIZER_STATE_DIR", "OPTIMIZER_DATABASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    cases = [("", {}), ('state_dir = "kept"\n', {}), ('state_dir = "kept"\n', {"OPTIMIZER_STATE_DIR": "env"}),
             ('state_dir = "kept"\n', {"OPTIMIZER_DATABASE_URL": "sqlite:///elsewhere.db"})]
    for text, env in cases:
        (tmp_path / "optimizer.toml").write_text(text)
        with monkeypatch.context() as patched:
            for variable, value in env.items():
                patched.setenv(variable, value)
            assert store_url_as_given(tmp_path) == store_url(load_settings(tmp_path), tmp_path)[0], (text, env)
    (tmp_path / "optimizer.toml").write_text("state_dir = 3\n")
    assert store_url_as_given(tmp_path) is None
