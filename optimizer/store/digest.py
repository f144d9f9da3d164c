"""A digest of recorded trials, to notice the store changed behind the harness's back.

Without bubblewrap a proposer runs as the user, and the store is a file it can write (or a
PostgreSQL it can reach): rewriting the baseline's trials to `failed` would steer this and every
later iteration's targets and gates, and nothing else would show it. So the loop takes this
digest of the completed runs its decisions rest on before any proposer runs, and compares it
after each proposer and before the gate decides (`StoreWatch`). A proposer can still write, but
not unnoticed: the expected digest lives only in the loop's memory.

Only completed runs are covered: no process writes to one again (an unfinished run may be
adopted and continued, so its rows may change for good reason).
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from sqlalchemy import select

from optimizer.errors import HarnessError
from optimizer.store import schema
from optimizer.store._repository import Owner
from optimizer.store.store import store_location

TRIAL_COLUMNS = ("id", "run_id", "suite", "task_id", "bucket", "split", "trial_index", "status", "score", "error")
"""What of a trial selection, the gate and later baselines read (transcripts are left out: large,
and read only by the request, which is written before the proposer runs)."""
GRADER_COLUMNS = ("trial_id", "grader", "score", "passed", "errored")


class StoreChanged(HarnessError):
    """Recorded trials changed while a proposer ran (or before the gate decided): the iteration
    stops with the harness's exit code (3); nothing is accepted."""


def trials_digest(store: Owner, run_ids: Iterable[str]) -> str:
    """sha256 over the runs' status and fingerprints, their trials' outcomes and grader results."""
    ids = sorted(set(run_ids))
    digest = hashlib.sha256()
    store.flush()
    with store.engine.connect() as conn:
        runs = conn.execute(select(schema.runs.c.run_id, schema.runs.c.status, schema.runs.c.fingerprints_json)
                            .where(schema.runs.c.run_id.in_(ids)).order_by(schema.runs.c.run_id)).all()
        trials = conn.execute(select(*(schema.trials.c[name] for name in TRIAL_COLUMNS))
                              .where(schema.trials.c.run_id.in_(ids)).order_by(schema.trials.c.id)).all()
        graders = conn.execute(select(*(schema.grader_results.c[name] for name in GRADER_COLUMNS))
                               .join(schema.trials, schema.trials.c.id == schema.grader_results.c.trial_id)
                               .where(schema.trials.c.run_id.in_(ids))
                               .order_by(schema.grader_results.c.id)).all()
    for rows in (runs, trials, graders):
        for row in rows:
            digest.update(repr(tuple(row)).encode())
        digest.update(b"\0")
    return digest.hexdigest()


class StoreWatch:
    """The digest of the completed runs among `run_ids`, taken when made; `changed` says whether
    the store still holds the same."""

    def __init__(self, store: Owner, run_ids: Iterable[str | None]):
        self.store = store
        wanted = sorted({run_id for run_id in run_ids if run_id})
        store.flush()
        with store.engine.connect() as conn:
            self.run_ids = list(conn.execute(select(schema.runs.c.run_id).where(
                schema.runs.c.run_id.in_(wanted), schema.runs.c.status == "completed")).scalars())
        self.digest = trials_digest(store, self.run_ids)

    def check(self, when: str, *, confined: bool) -> None:
        """Raise `StoreChanged` when the store no longer holds what it held when this was made;
        `when` says at which step (`while the proposer ran`)."""
        if trials_digest(self.store, self.run_ids) == self.digest:
            return
        how = "" if confined else ("confine the proposer with bubblewrap (the note at the start of the run says "
                                   "why it was not); ")
        raise StoreChanged(f"the store changed {when}: the recorded trials of {len(self.run_ids)} completed "
                           f"run(s) this iteration rests on ({', '.join(self.run_ids)}) are not what they were",
                           path=store_location(self.store.url),
                           fix=f"{how}those runs can no longer be trusted: start from a fresh store (state_dir or "
                               "database_url), or delete them")
