"""0002_loop, the closed loop's records: iterations and the proposals made in them. Frozen: never
edit (see `optimizer.store.revisions`)."""

from __future__ import annotations

from sqlalchemy import Column, Connection, DateTime, ForeignKey, Integer, MetaData, String, Table, Text, UniqueConstraint

metadata = MetaData()

Table(
    "iterations", metadata,
    Column("iteration_id", String, primary_key=True),
    Column("kind", String, nullable=False),
    Column("status", String, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("agent", String),
    Column("base_ref", String),
    Column("base_commit", String, nullable=False),
    Column("baseline_run_id", String),
    Column("targets_json", Text, nullable=False),
    Column("request_path", Text),
    Column("manual_sha256", String),
    Column("settings_json", Text, nullable=False),
    Column("summary_json", Text),
)

Table(
    "proposals", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("iteration_id", String, ForeignKey("iterations.iteration_id"), nullable=False, index=True),
    Column("ordinal", Integer, nullable=False),
    Column("agent", String, nullable=False),
    Column("branch", String, nullable=False),
    Column("proposer", String, nullable=False),
    Column("patcher_model", String),
    Column("manual_sha256", String),
    Column("status", String, nullable=False),
    Column("reason", Text, nullable=False),
    Column("rationale", Text, nullable=False),
    Column("diff", Text, nullable=False),
    Column("commit_sha", String),
    Column("candidate_run_id", String),
    Column("decision_json", Text),
    Column("usage_json", Text, nullable=False),
    Column("rollouts", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("iteration_id", "ordinal"),
)


def upgrade(conn: Connection) -> None:
    metadata.create_all(conn)
