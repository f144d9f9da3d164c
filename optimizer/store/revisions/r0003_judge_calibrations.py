"""0003_judge_calibrations, the recorded calibrations of the LLM judges against labelled examples.
Frozen: never edit (see `optimizer.store.revisions`)."""

from __future__ import annotations

from sqlalchemy import Column, Connection, DateTime, Float, Integer, MetaData, String, Table, Text

metadata = MetaData()

Table(
    "judge_calibrations", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("judge", String, nullable=False, index=True),
    Column("model", String, nullable=False),
    Column("rubric_hash", String, nullable=False),
    Column("examples", Integer, nullable=False),
    Column("errored", Integer, nullable=False),
    Column("spearman", Float),
    Column("agreement", Float),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("rows_json", Text, nullable=False),
)


def upgrade(conn: Connection) -> None:
    metadata.create_all(conn)
