"""0001_initial, the first release's store: runs, their trials and grader results, and the model
response cache. Frozen: never edit (see `optimizer.store.revisions`)."""

from __future__ import annotations

from sqlalchemy import (Boolean, Column, Connection, DateTime, Float, ForeignKey, Integer, MetaData, String, Table,
                        Text, UniqueConstraint)

metadata = MetaData()

Table(
    "runs", metadata,
    Column("run_id", String, primary_key=True),
    Column("kind", String, nullable=False),
    Column("status", String, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("settings_json", Text, nullable=False),
    Column("fingerprints_json", Text, nullable=False),
    Column("summary_json", Text),
)

Table(
    "trials", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String, ForeignKey("runs.run_id"), nullable=False, index=True),
    Column("suite", String, nullable=False),
    Column("task_id", String, nullable=False),
    Column("bucket", String, nullable=False),
    Column("split", String, nullable=False),
    Column("trial_index", Integer, nullable=False),
    Column("status", String, nullable=False),
    Column("score", Float),
    Column("error", Text),
    Column("duration_s", Float, nullable=False),
    Column("prompt_tokens", Integer, nullable=False),
    Column("completion_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("model_calls", Integer, nullable=False),
    Column("cache_hits", Integer, nullable=False),
    Column("transcript_json", Text, nullable=False),
    Column("outcome_json", Text, nullable=False),
    UniqueConstraint("run_id", "suite", "task_id", "trial_index"),
)

Table(
    "grader_results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("trial_id", Integer, ForeignKey("trials.id"), nullable=False, index=True),
    Column("grader", String, nullable=False),
    Column("score", Float),
    Column("passed", Boolean, nullable=False),
    Column("errored", Boolean, nullable=False),
    Column("rationale", Text, nullable=False),
    Column("details_json", Text, nullable=False),
)

Table(
    "response_cache", metadata,
    Column("key", String, primary_key=True),
    Column("model", String, nullable=False),
    Column("value_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)


def upgrade(conn: Connection) -> None:
    metadata.create_all(conn)
