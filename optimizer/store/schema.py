"""Table definitions of the store (SQLAlchemy Core), as the code reads and writes them. A change here
ships with a new revision in `optimizer/store/revisions/` that makes it
(`tests/optimizer/store/test_migrations.py`)."""

from __future__ import annotations

from sqlalchemy import (Boolean, Column, DateTime, Float, ForeignKey, Integer, MetaData, String, Table, Text,
                        UniqueConstraint)

metadata = MetaData()

schema_migrations = Table(
    "schema_migrations", metadata,
    Column("name", String, primary_key=True),
    Column("applied_at", DateTime(timezone=True), nullable=False),
)

schema_version = Table(
    "schema_version", metadata,
    Column("id", Integer, primary_key=True),
    Column("version", Integer, nullable=False),
)

runs = Table(
    "runs", metadata,
    Column("run_id", String, primary_key=True),
    Column("kind", String, nullable=False),
    Column("status", String, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("settings_json", Text, nullable=False),
    Column("fingerprints_json", Text, nullable=False),
    Column("summary_json", Text),
    Column("owner_host", String),
    Column("owner_pid", Integer),
    Column("owner_start", String),
    Column("heartbeat_at", DateTime(timezone=True)),
)

trials = Table(
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

grader_results = Table(
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

response_cache = Table(
    "response_cache", metadata,
    Column("key", String, primary_key=True),
    Column("model", String, nullable=False),
    Column("value_json", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

iterations = Table(
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
    Column("owner_host", String),
    Column("owner_pid", Integer),
    Column("owner_start", String),
    Column("heartbeat_at", DateTime(timezone=True)),
)

proposals = Table(
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

judge_calibrations = Table(
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

ledger = Table(
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

nightlies = Table(
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
