"""A digest of recorded trials, to notice the store changed behind the harness's back.

Without bubblewrap a proposer runs as the user, and the store is a file it can write (or a
PostgreSQL it can reach): rewriting the baseline's trials to `failed` would steer this and every
later iteration's targets and gates, and nothing else would show it. So the loop takes this
digest of the completed runs its decisions rest on before any proposer runs, and compares it
after each proposer and before the gate decides (`StoreWatch`). A proposer can still write, but
not unnoticed: the expected digest lives only in the loop's memory.

Only completed runs are covered: no process writes to one again (an unfinished run may be
adopted and continued, so its rows may change for good reason).

Inside a nightly job the watch covers the night as well (`NightScope`, `night_digest`): its
stored record (the settings every later decision and a resume read, its state), the iterations
it finished, every proposal of its iterations recorded so far (the decisions that set each later
decision's level), and its ledger entries so far (its budget). Those rows are written by the
night's own process between iterations, never while a proposer runs or a gate compares. The
nightly job also keeps the digest in a witness file in its state folder after each save
(`optimizer.nightly.night`), which a resume compares with the store before it trusts the record: a
proposer killed while it hung cannot leave rewritten settings behind for `--resume` to adopt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

from sqlalchemy import func, select

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


@dataclass(frozen=True)
class NightScope:
    """What of a nightly job the watch covers: the job, the iterations it finished (the current
    one's proposals are covered too), and how far its proposals and ledger reached."""

    nightly_id: str
    finished: tuple[str, ...]
    """The iterations the night finished, in order."""
    current: str | None = None
    proposals_upto: int = 0
    """Proposals with an id up to this one are covered (later ones are the night's own, still
    being written)."""
    ledger_upto: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"nightly_id": self.nightly_id, "finished": list(self.finished), "current": self.current,
                "proposals_upto": self.proposals_upto, "ledger_upto": self.ledger_upto}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NightScope":
        return cls(str(data["nightly_id"]), tuple(data["finished"]), data.get("current"),
                   int(data["proposals_upto"]), int(data["ledger_upto"]))


def night_scope(store: Owner, nightly_id: str, finished: Iterable[str], current: str | None = None) -> NightScope:
    """The scope of the night as the store holds it now: every proposal and ledger entry so far."""
    store.flush()
    with store.engine.connect() as conn:
        proposals = conn.execute(select(func.max(schema.proposals.c.id))).scalar() or 0
        ledger = conn.execute(select(func.max(schema.ledger.c.id))).scalar() or 0
    return NightScope(nightly_id, tuple(finished), current, int(proposals), int(ledger))


NIGHT_PARTS = ("record", "iterations", "decisions", "ledger")
"""What `night_digest` covers, each hashed apart so that a change is named."""


RECORD_FIXED = ("nightly_id", "branch", "base_ref", "base_commit", "started_at", "settings_json")
"""The columns of a night's record that none of its saves changes (its state, status and tip do)."""


def night_digest(store: Owner, scope: NightScope, *, whole_record: bool = True) -> dict[str, str]:
    """sha256 per part (`NIGHT_PARTS`) of what the night's later decisions rest on. Without
    `whole_record`, the record's part covers only `RECORD_FIXED` (a witness taken after one save
    then still matches a store a kill left one save further)."""
    iterations = [*scope.finished, *([scope.current] if scope.current else [])]
    columns = schema.nightlies.c if whole_record else [schema.nightlies.c[name] for name in RECORD_FIXED]
    store.flush()
    with store.engine.connect() as conn:
        parts = {
            "record": conn.execute(select(*columns).where(
                schema.nightlies.c.nightly_id == scope.nightly_id)).all(),
            "iterations": conn.execute(select(
                schema.iterations.c.iteration_id, schema.iterations.c.status, schema.iterations.c.base_commit,
                schema.iterations.c.targets_json, schema.iterations.c.settings_json,
                schema.iterations.c.summary_json).where(schema.iterations.c.iteration_id.in_(scope.finished))
                .order_by(schema.iterations.c.iteration_id)).all(),
            "decisions": conn.execute(select(
                schema.proposals.c.id, schema.proposals.c.iteration_id, schema.proposals.c.ordinal,
                schema.proposals.c.status, schema.proposals.c.reason, schema.proposals.c.diff,
                schema.proposals.c.commit_sha, schema.proposals.c.candidate_run_id,
                schema.proposals.c.decision_json).where(
                schema.proposals.c.iteration_id.in_(iterations), schema.proposals.c.id <= scope.proposals_upto)
                .order_by(schema.proposals.c.id)).all(),
            "ledger": conn.execute(select(
                schema.ledger.c.id, schema.ledger.c.role, schema.ledger.c.model, schema.ledger.c.calls,
                schema.ledger.c.prompt_tokens, schema.ledger.c.completion_tokens, schema.ledger.c.cost_usd).where(
                schema.ledger.c.nightly_id == scope.nightly_id, schema.ledger.c.id <= scope.ledger_upto)
                .order_by(schema.ledger.c.id)).all(),
        }
    out = {}
    for name in NIGHT_PARTS:
        digest = hashlib.sha256()
        for row in parts[name]:
            digest.update(repr(tuple(row)).encode())
        out[name] = digest.hexdigest()
    return out


NIGHT_WORDS = {"record": "stored record (settings and state)", "iterations": "finished iterations",
               "decisions": "recorded proposals and decisions", "ledger": "ledger entries (its budget)"}


def night_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The parts of a night that differ, in words."""
    return [NIGHT_WORDS[name] for name in NIGHT_PARTS if before.get(name) != after.get(name)]


class StoreWatch:
    """The digest of the completed runs among `run_ids` and, in a nightly job, of the night
    (`night`), taken when made (and again by `renew`); `check` says whether the store still
    holds the same."""

    def __init__(self, store: Owner, run_ids: Iterable[str | None], night: NightScope | None = None):
        self.store = store
        wanted = sorted({run_id for run_id in run_ids if run_id})
        store.flush()
        with store.engine.connect() as conn:
            self.run_ids = list(conn.execute(select(schema.runs.c.run_id).where(
                schema.runs.c.run_id.in_(wanted), schema.runs.c.status == "completed")).scalars())
        self.digest = trials_digest(store, self.run_ids)
        self.night = night
        self.night_digest = night_digest(store, night) if night else None

    def renew(self) -> None:
        """Cover the night as the store holds it now (the proposals decided since, the ledger so
        far): called before each proposer runs, after the harness's own writes."""
        if self.night is not None:
            self.night = night_scope(self.store, self.night.nightly_id, self.night.finished, self.night.current)
            self.night_digest = night_digest(self.store, self.night)

    def check(self, when: str, *, confined: bool) -> None:
        """Raise `StoreChanged` when the store no longer holds what it held when this was made;
        `when` says at which step (`while the proposer ran`)."""
        changed = []
        if trials_digest(self.store, self.run_ids) != self.digest:
            changed.append(f"the recorded trials of {len(self.run_ids)} completed run(s) this iteration rests on "
                           f"({', '.join(self.run_ids)})")
        if self.night is not None:
            changed += [f"nightly {self.night.nightly_id}'s {part}"
                        for part in night_changes(self.night_digest, night_digest(self.store, self.night))]
        if not changed:
            return
        how = "" if confined else ("confine the proposer with bubblewrap (the note at the start of the run says "
                                   "why it was not); ")
        raise StoreChanged(f"the store changed {when}: {'; '.join(changed)} are not what they were",
                           path=store_location(self.store.url),
                           fix=f"{how}what changed can no longer be trusted: start from a fresh store (state_dir or "
                               "database_url), or delete those rows")
