"""The store's frozen schema revisions (`optimizer/store/revisions/`), on SQLite and PostgreSQL.

* Each revision, applied by opening the store as the revisions before it left it (with rows in
  every table), keeps every row and brings the store to exactly the schema `schema.py` declares:
  the migrated database and one made by `schema.metadata.create_all` read back the same through
  SQLAlchemy's inspector (columns and types, keys, indexes, unique constraints, foreign keys).
  From a blank store this is also the check that fails when `schema.py` changes without a new
  revision.
* Revisions 1..k make the schema that the release which added revision k made on a blank store
  (`tests/optimizer/store/store_releases/`, written out from each release's own code), and a store made by each
  release, the last one before the revisions were frozen included, opens with its rows intact.
* A revision that fails leaves the store as it was; one that an earlier optimizer left halfway
  is finished.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, String, create_engine, inspect, select

from optimizer.store import Store, migrations, schema
from optimizer.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate
from optimizer.store.revisions.ops import add_columns

RELEASES = Path(__file__).parent / "store_releases"
NAMES = [name for name, _ in MIGRATIONS]
BOOKKEEPING = {"schema_migrations", "schema_version"}


@dataclass
class Databases:
    """Blank databases of one kind, as many as a test asks for (each by a label)."""

    kind: str
    tmp_path: Path
    request: pytest.FixtureRequest

    def new(self, label: str) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.tmp_path / label}.db"
        return self.request.getfixturevalue("postgres_server").new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def blank(request, tmp_path) -> Databases:
    return Databases(request.param, tmp_path, request)


def described(url: str) -> dict[str, Any]:
    """The schema of the database at `url` as SQLAlchemy's inspector reads it, table by table
    (columns by name: their order is not part of the schema)."""
    engine = create_engine(url)
    try:
        reader = inspect(engine)
        columns, keys = reader.get_multi_columns(), reader.get_multi_pk_constraint()
        indexes, unique = reader.get_multi_indexes(), reader.get_multi_unique_constraints()
        foreign = reader.get_multi_foreign_keys()
    finally:
        engine.dispose()
    return {table: {"columns": {column["name"]: {**column, "type": repr(column["type"])} for column in columns[key]},
                    "primary_key": keys[key], "indexes": sorted(indexes[key], key=repr),
                    "unique": sorted(unique[key], key=repr), "foreign_keys": sorted(foreign[key], key=repr)}
            for key in sorted(columns) for table in [key[1]]}


def declared(databases: Databases) -> dict[str, Any]:
    """The schema `schema.py` declares, as a database of this kind reads it back once
    `create_all` has made it on a blank one (once per kind and session: the declaration does not
    change while the tests run)."""
    if databases.kind not in _DECLARED:
        url = databases.new("declared")
        engine = create_engine(url)
        with engine.begin() as conn:
            schema.metadata.create_all(conn)
        engine.dispose()
        _DECLARED[databases.kind] = described(url)
    return _DECLARED[databases.kind]


_DECLARED: dict[str, dict[str, Any]] = {}


def differences(migrated: dict[str, Any], expected: dict[str, Any], path: str = "") -> list[str]:
    """Where two schemas differ, one line per differing entry (`nightlies.columns.note: ...`)."""
    if not (isinstance(migrated, dict) and isinstance(expected, dict)):
        return [] if migrated == expected else [f"{path}: migrated {migrated!r}, expected {expected!r}"]
    return [line for key in sorted(set(migrated) | set(expected), key=str)
            for line in differences(migrated.get(key), expected.get(key), f"{path}.{key}".lstrip("."))]


def assert_schema_is_declared(url: str, databases: Databases) -> None:
    found = differences(described(url), declared(databases))
    assert not found, ("the migrated store is not the schema that optimizer/store/schema.py declares; a change "
                       "there needs a new revision in optimizer/store/revisions/ that makes it:\n" + "\n".join(found))


def upgrade_to(url: str, target: int) -> None:
    """The store as the frozen revisions 1..`target` make it."""
    engine = create_engine(url)
    with engine.begin() as conn:
        migrate(conn, target=target)
    engine.dispose()


def release_ddl(revision: int, kind: str) -> str:
    """The DDL of a blank store made by the release that added `revision`: the first release's,
    then each later release's additions (a table made again replaces that table, in place)."""
    made: dict[str, str] = {}
    for name in NAMES[:revision]:
        script = (RELEASES / f"{name}.{kind}.sql").read_text(encoding="utf-8")
        for statement in filter(str.strip, re.sub(r"(?m)^--.*\n", "", script).split(";\n")):
            made[" ".join(statement.split()[:3]).strip('"')] = statement
    return "".join(f"{statement};\n" for statement in made.values())


def run_script(url: str, script: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.executescript(script)
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(script)
    engine.dispose()


def _value(column: dict[str, Any], n: int) -> Any:
    """Row n's value of a column, from its type; a foreign key column gets the value of the key
    it refers to in the referred table's row n (`run_id-1`, or the n-th autoincremented id)."""
    kind = column["type"].python_type
    if kind is str:
        return f"{column['name']}-{n}"
    if kind is bool:
        return n % 2 == 1
    if kind is datetime:
        return datetime(2026, 5, n, 9, 30, 15, 250000, tzinfo=timezone.utc)
    if kind is float:
        return n + 0.25
    assert kind is int, f"no test value for {column}"
    return n


def fill(url: str) -> MetaData:
    """Two rows in every table but the bookkeeping: the first with every column set, the second
    with the nullable ones empty. Returns the tables as they are now (their columns before any
    later revision)."""
    engine = create_engine(url)
    tables = MetaData()
    with engine.begin() as conn:
        tables.reflect(conn)
        for table in tables.sorted_tables:
            if table.name in BOOKKEEPING:
                continue
            generated = {column.name for column in table.primary_key.columns if column.autoincrement is True
                         or (len(table.primary_key.columns) == 1 and column.type.python_type is int)}
            columns = [column for column in inspect(conn).get_columns(table.name) if column["name"] not in generated]
            for n in (1, 2):
                conn.execute(table.insert().values({column["name"]: None if n == 2 and column["nullable"]
                                                    else _value(column, n) for column in columns}))
    engine.dispose()
    return tables


def rows(url: str, tables: MetaData) -> dict[str, list[dict[str, Any]]]:
    """The rows of `tables` (as they were declared when reflected: the columns they had then)."""
    engine = create_engine(url)
    with engine.connect() as conn:
        found = {table.name: [dict(row._mapping) for row in conn.execute(
                     select(table).order_by(*table.primary_key.columns))]
                 for table in tables.sorted_tables if table.name not in BOOKKEEPING}
    engine.dispose()
    return found


def records(url: str) -> tuple[dict[str, datetime], int]:
    engine = create_engine(url)
    with engine.connect() as conn:
        applied = {name: at for name, at in conn.execute(select(migrations.applied_revisions))}
        version = conn.execute(select(migrations.version_row.c.version)).scalar_one()
    engine.dispose()
    return applied, version


def open_and_check(url: str, databases: Databases, filled: MetaData) -> None:
    """Open the store as every command does; it must then have every revision recorded, the
    current version, every row of the `filled` tables as it was (in the columns they had) and
    exactly the declared schema."""
    before = rows(url, filled)
    assert sum(map(len, before.values())) == 2 * len(before)
    Store(url).close()
    applied, version = records(url)
    assert sorted(applied) == NAMES and version == SCHEMA_VERSION
    assert rows(url, filled) == before
    assert_schema_is_declared(url, databases)


@pytest.mark.parametrize("revision", range(1, SCHEMA_VERSION + 1), ids=NAMES)
def test_each_revision_upgrades_the_store_before_it_keeping_its_rows_to_the_declared_schema(blank, revision):
    url = blank.new("store")
    filled = MetaData()  # before the first revision, the database is blank
    if revision > 1:
        upgrade_to(url, revision - 1)
        assert records(url)[1] == revision - 1
        filled = fill(url)
    open_and_check(url, blank, filled)


def test_a_blank_store_gets_exactly_the_schema_that_schema_py_declares(blank):
    """Fails when a table, column, type, key or index changes in `schema.py` without a revision
    that makes the change."""
    url = blank.new("store")
    Store(url).close()
    assert_schema_is_declared(url, blank)


@pytest.mark.parametrize("revision", range(1, SCHEMA_VERSION + 1), ids=NAMES)
def test_the_revisions_up_to_each_make_the_schema_of_the_release_that_added_it(blank, revision):
    url, release = blank.new("frozen"), blank.new("release")
    upgrade_to(url, revision)
    run_script(release, release_ddl(revision, blank.kind))
    assert not differences(described(url), described(release))


@pytest.mark.parametrize("revision", range(1, SCHEMA_VERSION + 1), ids=NAMES)
def test_a_store_made_by_each_release_opens_with_its_rows_intact(blank, revision):
    """The release's own DDL, its records (each release recorded the revisions it applied and
    their number), then rows; the last release's store is what the optimizer made until its
    revisions were frozen."""
    url = blank.new("store")
    recorded = "".join(f"INSERT INTO schema_migrations VALUES ('{name}', '2026-05-01 09:00:00');\n"
                       for name in NAMES[:revision])
    run_script(url, release_ddl(revision, blank.kind) + recorded
               + f"INSERT INTO schema_version VALUES (1, {revision});\n")
    open_and_check(url, blank, fill(url))
    applied, _ = records(url)
    assert sorted(name for name, at in applied.items() if at.month == 5) == NAMES[:revision]


def test_a_revision_that_fails_leaves_the_store_as_it_was(blank, monkeypatch):
    """Everything one opening applies is one transaction, SQLite's `CREATE`s and `ALTER`s too."""
    url = blank.new("store")
    upgrade_to(url, 3)
    before = described(url)

    def broken(conn):
        add_columns(conn, "runs", {"half_done": String()})
        raise RuntimeError("revision 6 failed halfway")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, ("0006_broken", broken)])
    engine = create_engine(url)
    with pytest.raises(RuntimeError, match="halfway"), engine.begin() as conn:
        migrate(conn)
    engine.dispose()
    applied, version = records(url)
    assert described(url) == before
    assert sorted(applied) == NAMES[:3] and version == 3


def test_a_store_left_halfway_through_a_revision_by_the_earlier_optimizer_is_finished(blank):
    """Before revisions ran in one transaction, each SQLite `ALTER` committed on its own: a
    process killed inside 0005_run_owners left some owner columns and no record of it."""
    url = blank.new("store")
    upgrade_to(url, 4)
    run_script(url, "ALTER TABLE runs ADD COLUMN owner_host VARCHAR;\n")
    open_and_check(url, blank, fill(url))
