"""The runs table: one row per run of trials (an eval, a loop's baseline or candidate, a bench)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable

from sqlalchemy import func, insert, or_, select, update

from optimizer.store import schema
from optimizer.store._repository import Repository, decode
from optimizer.store.ownership import is_gone, owner_rows, same_owner

if TYPE_CHECKING:
    import pandas as pd

    from optimizer.types import RunResult

UNFINISHED = ("running", "interrupted", "stopped", "crashed")
"""Statuses of a run that did not get to the end of its trials."""


class Runs(Repository):
    """Runs are written when they start and when they end, each time after the trials queued
    before, so a finished run is all on disk."""

    def start(self, run: RunResult, kind: str = "eval") -> None:
        with self._writing() as conn:
            conn.execute(insert(schema.runs).values(
                run_id=run.run_id, kind=kind, status="running", started_at=run.started_at,
                settings_json=json.dumps(run.settings, default=str),
                fingerprints_json=json.dumps(run.fingerprints, default=str), **self._store.owned()))

    def finish(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        with self._writing() as conn:
            conn.execute(update(schema.runs).where(schema.runs.c.run_id == run_id).values(
                status=status, finished_at=datetime.now(timezone.utc),
                summary_json=json.dumps(summary, default=str)))

    def exists(self, run_id: str) -> bool:
        with self._reading() as conn:
            return conn.execute(select(schema.runs.c.run_id).where(schema.runs.c.run_id == run_id)).first() is not None

    def get(self, run_id: str) -> dict[str, Any] | None:
        with self._reading() as conn:
            row = conn.execute(select(schema.runs).where(schema.runs.c.run_id == run_id)).mappings().first()
        return decode(row) if row else None

    def find_reusable(self, fingerprints: dict[str, Any], trial_count: int) -> str | None:
        """The newest completed run with exactly these fingerprints and every planned trial."""
        wanted = _canonical(fingerprints)
        with self._reading() as conn:
            rows = conn.execute(select(schema.runs.c.run_id, schema.runs.c.fingerprints_json)
                                .where(schema.runs.c.status == "completed")
                                .order_by(schema.runs.c.started_at.desc())).all()
            for run_id, stored in rows:
                if _canonical(json.loads(stored)) != wanted:
                    continue
                count = conn.execute(select(func.count()).select_from(schema.trials)
                                     .where(schema.trials.c.run_id == run_id)).scalar_one()
                if count == trial_count:
                    return run_id
        return None

    def adopt(self, fingerprints: dict[str, Any], kind: str) -> str | None:
        """The newest run of this kind that never finished (its process was killed, interrupted,
        stopped by a budget or crashed) and has exactly these fingerprints, made this process's
        (`running`, owned here): its recorded trials can be kept and only the rest run. A run
        whose owner is alive (another job running it now, here or on another machine) is never
        taken; two jobs that find the same run take it by compare-and-set, the second moving on
        to the next, or to none."""
        table = schema.runs
        for row in self._unfinished(fingerprints, kind):
            with self._writing() as conn:
                taken = conn.execute(update(table).where(table.c.run_id == row["run_id"],
                                                         table.c.status == row["status"], *same_owner(table, row))
                                     .values(status="running", finished_at=None, **self._store.owned()))
            if taken.rowcount:
                return row["run_id"]
        return None

    def left_by(self, jobs: list[dict[str, Any]], fingerprints: dict[str, Any], kind: str) -> str | None:
        """The newest run of this kind with exactly these fingerprints that the process of one of
        `jobs` (interrupted iterations: `Iterations.interrupted_since_verdict`) started during it,
        finished or not: what that iteration ran before it was killed, for the one resumed in its
        place to take in (its trials are the same prompts at the same indexes)."""
        if not jobs:
            return None
        table, wanted = schema.runs, _canonical(fingerprints)
        during = [(table.c.owner_host == job["owner_host"]) & (table.c.owner_pid == job["owner_pid"])
                  & (table.c.owner_start == job["owner_start"]) & (table.c.started_at >= job["started_at"])
                  for job in jobs]
        query = (select(table.c.run_id, table.c.fingerprints_json).where(table.c.kind == kind, or_(*during))
                 .order_by(table.c.started_at.desc()))
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return next((run_id for run_id, stored in rows if _canonical(json.loads(stored)) == wanted), None)

    def _unfinished(self, fingerprints: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        """Unfinished runs of this kind with these fingerprints, newest first, but those whose
        owner is alive: each with its status and owner."""
        wanted, table = _canonical(fingerprints), schema.runs
        with self._reading() as conn:
            rows = owner_rows(conn, table.c.run_id, table.c.status.in_(UNFINISHED), table.c.kind == kind,
                              extra=(table.c.fingerprints_json,), order=table.c.started_at.desc())
        return [row for row in rows if _canonical(json.loads(row["fingerprints_json"])) == wanted
                and (row["status"] != "running" or is_gone(row))]

    def of_spec(self, fingerprints: dict[str, Any], kind: str, *, started_before: datetime) -> list[str]:
        """Runs of this kind started before `started_before`, oldest first, whose run spec is these
        fingerprints up to the number of trials planned per task (finished or not: every recorded
        trial is whole)."""
        wanted = _canonical(_without_counts(fingerprints))
        with self._reading() as conn:
            rows = conn.execute(select(schema.runs.c.run_id, schema.runs.c.fingerprints_json)
                                .where(schema.runs.c.kind == kind, schema.runs.c.started_at < started_before)
                                .order_by(schema.runs.c.started_at, schema.runs.c.run_id)).all()
        return [run_id for run_id, stored in rows
                if _canonical(_without_counts(json.loads(stored))) == wanted]

    def of_agent_setup(self, fingerprints: dict[str, Any], agents: Iterable[str], *,
                       finished_by: datetime) -> list[tuple[str, dict[str, Any], set[str]]]:
        """Runs, oldest first, last finished by `finished_by`, with the models, packages and
        optimizer source of `fingerprints`, its graders where both have them, and some of
        `agents` set up as there (the same agent spec: its code and system prompt); each with its
        fingerprints and those agents. The project's commit and the tasks may differ: a trial's
        task is checked against the run's."""
        same = {key: fingerprints.get(key) for key in ("models", "packages", "optimizer_source")}
        graders = fingerprints.get("graders") or {}
        wanted = {agent: spec for agent in agents if (spec := (fingerprints.get("agents") or {}).get(agent))}
        if not wanted:
            return []
        table = schema.runs
        with self._reading() as conn:
            rows = conn.execute(select(table.c.run_id, table.c.fingerprints_json)
                                .where(table.c.finished_at.is_not(None), table.c.finished_at <= finished_by)
                                .order_by(table.c.started_at, table.c.run_id)).all()
        found = []
        for run_id, stored in rows:
            spec = json.loads(stored)
            if any(spec.get(key) != value for key, value in same.items()) or any(
                    graders.get(name, version) != version for name, version in (spec.get("graders") or {}).items()):
                continue
            matching = {agent for agent, wants in wanted.items() if (spec.get("agents") or {}).get(agent) == wants}
            if matching:
                found.append((run_id, spec, matching))
        return found

    def rows(self, *columns: str, last: int | None = None) -> list[dict[str, Any]]:
        """Runs, oldest first, as dicts whose JSON columns are decoded (`summary_json` read as
        `summary`). Name `columns` to read only those (decoding every run's summary costs on a
        large store); `last` keeps only the newest so many."""
        table = schema.runs
        query = select(*(table.c[name] for name in columns)) if columns else select(table)
        order = (table.c.started_at, table.c.run_id)
        query = query.order_by(*(column.desc() for column in order)).limit(last) if last else query.order_by(*order)
        with self._reading() as conn:
            rows = [decode(row) for row in conn.execute(query).mappings().all()]
        return rows[::-1] if last else rows

    def frame(self) -> pd.DataFrame:
        return self._frame(select(schema.runs).order_by(schema.runs.c.started_at))


def _canonical(fingerprints: dict[str, Any]) -> str:
    """Fingerprints as one comparable string, whatever the order of their keys."""
    return json.dumps(fingerprints, sort_keys=True, default=str)


def _without_counts(fingerprints: dict[str, Any]) -> dict[str, Any]:
    tasks = {key: task_without_count(task) for key, task in (fingerprints.get("tasks") or {}).items()}
    return {**fingerprints, "tasks": tasks}


def task_without_count(task: dict[str, Any]) -> dict[str, Any]:
    """A task's spec in a run's fingerprints without the trials that run planned of it."""
    return {**task, "trials": 0}
