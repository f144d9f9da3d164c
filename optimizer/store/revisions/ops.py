"""Steps a revision takes on an existing table (`CREATE TABLE` is the revision's own `MetaData`)."""

from __future__ import annotations

from sqlalchemy import Connection, inspect
from sqlalchemy.types import TypeEngine


def add_columns(conn: Connection, table: str, columns: dict[str, TypeEngine]) -> None:
    """Add the nullable `columns` (name: type) that `table` lacks, each typed for the database.

    One already there is skipped: a store opened by the optimizer before revisions were applied
    in one transaction on SQLite (where each DDL statement committed on its own) may have been
    killed between two of them, and the next opener finishes what that one started."""
    present = {column["name"] for column in inspect(conn).get_columns(table)}
    quote = conn.dialect.identifier_preparer.quote
    for name, kind in columns.items():
        if name not in present:
            conn.exec_driver_sql(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} "
                                 f"{kind.compile(dialect=conn.dialect)}")
