"""What the store's background writer does with a batch: one statement per table.

A statement per row costs SQLAlchemy more than SQLite takes to store the row, so a batch of
trials, grader results, cache entries and ledger rows is written with one executemany each.

Several processes may write to one store (a team's PostgreSQL server, or two jobs on one SQLite
file): a cache entry another process stored first is skipped by the insert itself (`ON CONFLICT
DO NOTHING`), since a check-then-insert would let both pass the check and one fail the insert.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from optimizer.store import schema
from optimizer.types import Trial


def write_batch(conn, batch: list[tuple[str, Any]]) -> None:
    """Write a batch of `(kind, payload)` records queued by the store, in one transaction."""
    trials = [payload for kind, payload in batch if kind == "trial"]
    ledger = [payload[0] for kind, payload in batch if kind == "ledger"]
    cache: dict[str, tuple] = {}
    for kind, payload in batch:
        if kind == "cache":
            cache.setdefault(payload[0], payload)  # the first answer stored under a key stays
    if trials:
        _write_trials(conn, trials)
    if ledger:
        conn.execute(_INSERT_LEDGER, ledger)
    if cache:
        _write_cache(conn, list(cache.values()))


# Built once: constructing a statement costs more than SQLite takes to run it.
_INSERT_TRIAL = insert(schema.trials)
_INSERT_TRIAL_IDS = _INSERT_TRIAL.returning(schema.trials.c.id, sort_by_parameter_order=True)
_INSERT_GRADES = insert(schema.grader_results)
_INSERT_CACHE = insert(schema.response_cache)
_INSERT_NEW_CACHE = {
    "sqlite": sqlite.insert(schema.response_cache).on_conflict_do_nothing(index_elements=["key"]),
    "postgresql": postgresql.insert(schema.response_cache).on_conflict_do_nothing(index_elements=["key"]),
}
"""Per dialect, an insert that skips a key already stored; other databases check first."""
_INSERT_LEDGER = insert(schema.ledger)
_CACHE_STORED = select(schema.response_cache.c.key).where(
    schema.response_cache.c.key.in_(bindparam("keys", expanding=True)))


def _trial_row(run_id: str, trial: Trial) -> dict[str, Any]:
    usage = trial.transcript.usage
    return dict(run_id=run_id, suite=trial.suite, task_id=trial.task_id, bucket=trial.bucket,
                split=trial.split, trial_index=trial.index, status=trial.status, score=trial.score,
                error=trial.error, duration_s=trial.duration_s, prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens, cost_usd=usage.cost_usd,
                model_calls=usage.calls, cache_hits=usage.cache_hits,
                transcript_json=trial.transcript.model_dump_json(),
                outcome_json=trial.outcome.model_dump_json())


def _write_trials(conn, trials: list[tuple[str, Trial]]) -> None:
    """The trials and their grader results; the trial rows' ids come back in the order given
    (one row at a time on a database that cannot return them from a multi-row insert)."""
    rows = [_trial_row(run_id, trial) for run_id, trial in trials]
    if conn.dialect.insert_executemany_returning_sort_by_parameter_order:
        ids = conn.execute(_INSERT_TRIAL_IDS, rows).scalars().all()
    else:
        ids = [conn.execute(_INSERT_TRIAL, row).inserted_primary_key[0] for row in rows]
    grades = [{"trial_id": trial_id, "grader": result.grader, "score": result.score, "passed": result.passed,
               "errored": result.errored, "rationale": result.rationale,
               "details_json": json.dumps(result.details, default=str)}
              for trial_id, (_, trial) in zip(ids, trials) for result in trial.grader_results]
    if grades:
        conn.execute(_INSERT_GRADES, grades)


def _write_cache(conn, entries: list[tuple[str, str, Any]]) -> None:
    """New cache entries; a key already stored keeps its first answer."""
    now = datetime.now(timezone.utc)
    rows = [{"key": key, "model": model, "created_at": now, "value_json": json.dumps(value, ensure_ascii=False)}
            for key, model, value in entries]
    statement = _INSERT_NEW_CACHE.get(conn.dialect.name)
    if statement is None:
        stored = set(conn.execute(_CACHE_STORED, {"keys": [row["key"] for row in rows]}).scalars())
        rows, statement = [row for row in rows if row["key"] not in stored], _INSERT_CACHE
    if rows:
        conn.execute(statement, rows)
