"""One nightly job per repository: a lock held while the job runs, that its end always releases.

Which lock depends on the store (`repository_lock`). With a SQLite store, everything is on one
machine and the lock is an exclusive `flock` on a file in the state folder (`job_lock`). With a
PostgreSQL store, shared by a team, jobs on other machines (each with its own state folder) must
be kept out too, so the lock is the server's: a session-level advisory lock (`advisory_lock`),
keyed by a hash of the repository's identity (its root commit, the same in every clone).

The file lock: the kernel decides who holds it, never the file's content. A job holds it for as
long as its process keeps the file open, and loses it when the process ends, however it ends: a
killed job's lock is never stale, so there is no takeover for two starting jobs to race over. The
holder writes `{pid, host, started_at, job}` into the file only so that a second job can say who
holds it; the content may be empty (the holder is still writing it), half-written or left by a
killed job, and none of that changes who holds the lock.

The holder removes the file before it lets go. A job that opened the file just before that would
otherwise lock a file no longer at the path while a third job locks a new one there; so a job
that takes the lock checks that the path still names the file it locked, and starts over if not.
For the same reason the file must not be removed by hand while a job runs.

The advisory lock: the server holds it for as long as the job's own database session lives, and
lets go when the session ends, however it ends (the job finishes, is killed, or its machine
loses the connection). The session's `application_name` names the job, pid and host, so that a
second job can say who holds it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from git import GitCommandError
from sqlalchemy import Connection, create_engine, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from optimizer.errors import InputError, first_line
from optimizer.store.store import store_error, store_location

MAX_CONTENT_BYTES = 4096
"""What is read of a lock file for the message naming its holder (the holder writes ~120 bytes)."""


class LockHeld(InputError):
    """Another job holds the lock."""


@contextmanager
def repository_lock(store: Any, path: Path, repository: str, job: str,
                    log: Callable[[str], None] = print) -> Iterator[dict]:
    """Hold the repository's job lock for the `with` block, or raise `LockHeld` naming the holder.

    On a PostgreSQL store, the server's advisory lock for `repository` (see `repository_identity`),
    which holds across machines; on any other store, the lock file at `path`. Yields who this job
    is (`pid`, `host`, `job`, `started_at`)."""
    if store.engine.dialect.name == "postgresql":
        with advisory_lock(store.url, repository, job) as me:
            yield me
    else:
        with job_lock(path, job, log) as me:
            yield me


def repository_identity(repo) -> str:
    """What names a repository the same in every clone: its root commit (the oldest commits of
    HEAD's history, when several histories were merged). A repository without a commit yet is
    named by its folder: no other machine can be working on its history."""
    try:
        roots = sorted(repo.git.rev_list("--max-parents=0", "HEAD").split())
    except GitCommandError:  # no HEAD yet: git's own error comes when the job resolves its base
        roots = []
    return " ".join(roots) or str(Path(repo.working_tree_dir).resolve())


def _me(job: str) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "job": job,
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


@contextmanager
def job_lock(path: Path, job: str, log: Callable[[str], None] = print) -> Iterator[dict]:
    """Hold the lock at `path` for the `with` block, or raise `LockHeld` naming the holder.

    Yields what this job wrote into the file. A lock file left by a job that ended without
    removing it (killed) is reused, with a note through `log`."""
    me = _me(job)
    handle = _acquire(path)
    try:
        previous = _content(handle)
        if previous is not None:
            log(f"taking over a stale lock: pid {previous.get('pid')} on {previous.get('host')} is no longer running "
                f"({previous.get('job')}, since {previous.get('started_at')})")
        os.ftruncate(handle, 0)
        os.pwrite(handle, json.dumps(me).encode("utf-8"), 0)
        try:
            yield me
        finally:
            if _names(path, handle):
                path.unlink()
    finally:
        os.close(handle)  # lets go of the lock


def _acquire(path: Path) -> int:
    """An open descriptor of the file at `path`, exclusively locked by this process."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder of the lock file: {exc.strerror or exc}", path=path,
                         fix="check that the state folder (state_dir) is writable") from None
    while True:
        try:
            handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise InputError(f"cannot open the lock file: {exc.strerror or exc}", path=path,
                             fix="check that the state folder (state_dir) is writable and the lock is a plain file") \
                from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _content(handle)
            os.close(handle)
            raise _held(path, holder) from None
        except OSError as exc:
            os.close(handle)
            raise InputError(f"cannot lock the lock file: {exc.strerror or exc}", path=path,
                             fix="keep the state folder (state_dir) on a file system that supports flock") from None
        except BaseException:
            os.close(handle)
            raise
        if _names(path, handle):
            return handle
        os.close(handle)  # its holder removed it between our open and our lock: lock the file now at the path


def _names(path: Path, handle: int) -> bool:
    """Whether `path` still names the file open as `handle`."""
    try:
        linked = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle)
    return (linked.st_dev, linked.st_ino) == (opened.st_dev, opened.st_ino)


def _content(handle: int) -> dict | None:
    """The holder a lock file names; None when it names none (empty, half-written, not ours)."""
    try:
        data = json.loads(os.pread(handle, MAX_CONTENT_BYTES, 0).decode("utf-8"))
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or nested absurdly
        return None
    return data if isinstance(data, dict) and "pid" in data else None


def _held(path: Path | str, holder: dict | None,
          unnamed: str = "it has not yet written its pid into the lock file") -> LockHeld:
    fix = "wait for it to finish (or stop it); only one nightly job runs per repository"
    if holder is None:
        return LockHeld(f"another job is running on this repository ({unnamed})", path=path, fix=fix)
    if holder.get("host") != socket.gethostname():
        return LockHeld(f"another job ({holder.get('job')}) holds the lock on host {holder.get('host')} "
                        f"(pid {holder.get('pid')}, since {holder.get('started_at')})", path=path,
                        fix=f"wait for it to finish (or stop it on {holder.get('host')}); only one nightly job runs "
                            "per repository")
    return LockHeld(f"another job ({holder.get('job')}) is running on this repository: pid {holder.get('pid')}, "
                    f"since {holder.get('started_at')}", path=path, fix=fix)


# ------------------------------------------------------------------ PostgreSQL
APPLICATION_NAME = re.compile(r"^(?P<job>.+) pid (?P<pid>\d+) on (?P<host>.*)$")
"""How a holder's session names it (`optimizer nightly pid 4321 on buildbox`); PostgreSQL keeps
the first 63 bytes, so a long host name may be cut short."""


def lock_key(repository: str) -> int:
    """The advisory lock's key: a signed 64-bit hash of the repository's identity."""
    digest = hashlib.sha256(f"optimizer job lock\0{repository}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextmanager
def advisory_lock(url: str, repository: str, job: str) -> Iterator[dict]:
    """Hold the PostgreSQL advisory lock of `repository` in the database at `url` for the `with`
    block, or raise `LockHeld` naming the holder.

    The lock lives in a session of its own (not one of the store's pooled connections, which
    would keep it when handed back), outside any transaction so that it is never left idle in
    one for the night. Closing that session at the end lets go of the lock."""
    me = _me(job)
    key = lock_key(repository)
    engine = create_engine(url, poolclass=NullPool,
                           connect_args={"application_name": f"{job} pid {me['pid']} on {me['host']}"})
    conn = None
    try:
        try:
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            taken = conn.execute(select(func.pg_try_advisory_lock(key))).scalar_one()
            holder = None if taken else _advisory_holder(conn, key)
        except DBAPIError as exc:
            raise store_error(url, f"cannot take the job lock: {first_line(str(exc.orig or exc))}") from None
        if not taken:
            raise _held(store_location(url), holder, unnamed="its session could not be named")
        yield me
    finally:
        if conn is not None:
            conn.close()
        engine.dispose()


_HOLDER = text("""
    SELECT activity.application_name, activity.backend_start
    FROM pg_locks AS lock JOIN pg_stat_activity AS activity ON activity.pid = lock.pid
    WHERE lock.locktype = 'advisory' AND lock.granted AND lock.objsubid = 1
      AND lock.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND CAST(lock.classid AS bigint) = :high AND CAST(lock.objid AS bigint) = :low
""")
"""Who holds an advisory lock: a 64-bit key is shown split in two unsigned halves."""


def _advisory_holder(conn: Connection, key: int) -> dict | None:
    """The job holding the advisory lock `key`, from its session's name; None when that is not a
    job of ours, or it let go in the meantime."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    row = conn.execute(_HOLDER, {"high": unsigned >> 32, "low": unsigned & 0xFFFF_FFFF}).first()
    match = APPLICATION_NAME.match(row.application_name or "") if row else None
    if match is None:
        return None
    since = row.backend_start.isoformat(timespec="seconds") if row.backend_start else "an unknown time"
    return {**match.groupdict(), "pid": int(match["pid"]), "started_at": since}
