"""The nightly job's witness of its own record: a file in the state folder, beside the store.

A night resumes from its stored record (`optimizer.nightly.night`): the settings every later decision
reads, the iterations and decisions that set each later decision's level (`optimizer.nightly.spending`),
the ledger that holds its budget. A proposer can reach the store (a PostgreSQL server on the
network, or an SQLite file when it runs unconfined) and could rewrite that record, hang, and be
killed with the night: `--resume` would then adopt what it wrote. So after each save the night
writes the digest of what it stored (`store.digest.night_digest`) and its settings to this file,
which a proposer under bubblewrap cannot write (the whole filesystem but its box is read-only to
it), and a resume compares the store with it before trusting the record.

The witness is written just after each save, so a kill between the two leaves the store one save
ahead of it. What a save changes (the state, the iterations the night ended) is therefore checked
as "the store holds at least what the witness saw"; the rest (the settings, the recorded
decisions and ledger entries up to the witness's bounds) exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from optimizer.store.digest import NightScope, StoreChanged, night_changes, night_digest, night_scope
from optimizer.store.store import store_location


def witness_path(state_dir: Path, nightly_id: str) -> Path:
    return state_dir / "nightly" / f"{nightly_id}.json"


def write_witness(store, state_dir: Path, nightly_id: str, finished: list[str], settings: dict[str, Any]) -> None:
    """The night's record as it was just saved: its scope, digest and settings (atomically)."""
    scope = night_scope(store, nightly_id, finished)
    path = witness_path(state_dir, nightly_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    digest = night_digest(store, scope, whole_record=False)
    temporary.write_text(json.dumps({"scope": scope.as_dict(), "digest": digest,
                                     "settings": settings}, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)


def check_witness(store, state_dir: Path, record: dict[str, Any], log) -> None:
    """Raise `StoreChanged` (exit 3) when the stored night differs from its witness, naming the
    settings that changed; without a witness (a night started by another clone or an older
    version) say so and trust the store."""
    nightly_id = record["nightly_id"]
    path = witness_path(state_dir, nightly_id)
    if not path.is_file():
        log(f"note: nightly {nightly_id} has no witness in {path.parent}: its stored record is resumed as the store "
            f"holds it")
        return
    witness = json.loads(path.read_text(encoding="utf-8"))
    scope = NightScope.from_dict(witness["scope"])
    changed = night_changes(witness["digest"], night_digest(store, scope, whole_record=False))
    # a save only adds ended iterations: one missing was taken out
    if set(scope.finished) - set(ended_iterations(record.get("state") or {})):
        changed.append("list of the iterations it ended")
    if not changed:
        return
    settings = _setting_changes(witness.get("settings") or {}, record.get("settings") or {})
    detail = f" (settings: {', '.join(settings)})" if settings else ""
    raise StoreChanged(f"nightly {nightly_id}'s {'; '.join(changed)}{detail} changed in the store after its "
                       f"process last saved them", path=store_location(store.url),
                       fix=f"no process of the night writes there between its saves: check the proposer (confine it "
                           f"with bubblewrap, keep database credentials out of its environment, docs/trust.md) and "
                           f"start a new night; to resume on the store as it is, delete {path}")


def ended_iterations(state: dict[str, Any]) -> list[str]:
    """The iterations a night's saved state says it ended: its watch's (once the watch's state is
    kept), the interrupted ones and the finished ones."""
    watch = [state["watch_iteration"]] if state.get("watch") is not None and state.get("watch_iteration") else []
    return [*watch, *(state.get("interrupted") or []),
            *(row["iteration_id"] for row in state.get("iterations") or [] if row.get("iteration_id"))]


def _setting_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    keys = sorted(set(before) | set(after))
    return [f"{key} {before.get(key)!r} -> {after.get(key)!r}" for key in keys if before.get(key) != after.get(key)]
