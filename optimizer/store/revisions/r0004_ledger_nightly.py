"""0004_ledger_nightly, the cost ledger of every model call and the nightly jobs' records.
Frozen: never edit (see `optimizer.store.revisions`)."""

from __future__ import annotations

from sqlalchemy import Column, Connection, DateTime, Float, Integer, MetaData, String, Table, Text

metadata = MetaData()

Table(
    "ledger", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("role", String, nullable=False),
    Column("model", String, nullable=False),
    Column("run_id", String, index=True),
    Column("iteration_id", String, index=True),
    Column("nightly_id", String, index=True),
    Column("calls", Integer, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
)

Table(
    "nightlies", metadata,
    Column("nightly_id", String, primary_key=True),
    Column("branch", String, nullable=False),
    Column("base_ref", String, nullable=False),
    Column("base_commit", String, nullable=False),
    Column("tip_commit", String, nullable=False),
    Column("status", String, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("settings_json", Text, nullable=False),
    Column("state_json", Text, nullable=False),
)


def upgrade(conn: Connection) -> None:
    metadata.create_all(conn)
