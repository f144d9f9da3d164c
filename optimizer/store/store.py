"""Reading and writing run records. SQLite by default; PostgreSQL for a team (docs/postgresql.md)."""

from __future__ import annotations

import queue
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url, select
from sqlalchemy.exc import DatabaseError, DBAPIError

from optimizer.errors import StoreError, first_line
from optimizer.store import schema
from optimizer.store.address import store_url, without_password
from optimizer.store.cache import CachedResponses
from optimizer.store.calibrations import Calibrations
from optimizer.store.iterations import Iterations
from optimizer.store.ledger import LedgerEntries
from optimizer.store.migrations import migrate, sqlite_lock
from optimizer.store.nightlies import Nightlies
from optimizer.store.ownership import Heartbeat, close_gone, stamp_heartbeat, this_process
from optimizer.store.proposals import Proposals
from optimizer.store.runs import Runs
from optimizer.store.trials import Trials


def open_store(settings, project_root: Path) -> "Store":
    """The project's store: `database_url` when set, else SQLite in the state folder. A store that
    cannot be opened is a configuration error naming the setting to change."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from optimizer.errors import ConfigError

    url, field = store_url(settings, project_root)
    try:
        return Store(url)
    except (ArgumentError, NoSuchModuleError) as exc:
        reason = first_line(str(exc), type(exc).__name__)
        raise ConfigError(f"not a database URL SQLAlchemy can use: {reason}", field=field,
                          fix="e.g. sqlite:////abs/path/optimizer.db or postgresql+psycopg://user@host/db") from None
    except ImportError as exc:
        fix = f"install it in this environment (pip install {exc.name or 'the driver'})"
        if make_url(url).get_backend_name() == "postgresql":
            fix += ", or use postgresql+psycopg://..., whose driver comes with the optimizer (docs/postgresql.md)"
        raise ConfigError(f"the database driver is not installed: {exc}", field=field, fix=fix) from None
    except (OperationalError, OSError) as exc:
        reason = first_line(str(exc), type(exc).__name__)
        raise ConfigError(f"cannot open the store at {store_location(url)}: {reason}", field=field,
                          fix=_open_fix(exc, reason)) from None


UNREACHED = ("unable to open", "readonly", "read-only", "permission", "connect", "does not exist", "host name",
             "authentication", "no such file")
"""Words of a database error that say the store could not be reached or written at all (a
folder, a file, a server), as opposed to a fault met once it was open."""


def _open_fix(exc: BaseException, reason: str) -> str:
    """What to do about a store that failed to open: another place when it cannot be reached or
    written, else the database itself (a fault that another try may not meet)."""
    if isinstance(exc, OSError) or any(word in reason.lower() for word in UNREACHED):
        return "point it at a writable folder or a reachable database"
    return "run the command again; if it fails the same way, check the database (free disk space, the server)"


CORRUPTION = ("malformed", "not a database", "corrupt")
"""What SQLite says of a damaged file (`database disk image is malformed`, `file is not a
database`) and what `PRAGMA quick_check` reports."""


def store_error(url: str, reason: str) -> StoreError:
    """A fault of the store at `url` as the error that stops the job, with the fix. `reason` is
    the database's own words (no credentials: a server URL is shown without its password)."""
    where = store_location(url)
    if url.startswith("sqlite") and any(marker in reason.lower() for marker in CORRUPTION):
        return StoreError(f"the store is corrupt: {reason}", path=where,
                          fix=f"restore {where} from a backup, or move it aside (the next run starts an empty "
                              "store), or set state_dir (env OPTIMIZER_STATE_DIR) to another folder")
    return StoreError(f"the store failed: {reason}", path=where,
                      fix="check the database (free disk space, permissions, the server) and run again; "
                          "trials already recorded are kept")


def store_location(url: str) -> str:
    """Where the store is, for messages: a SQLite file's path, else the URL without its password."""
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    return without_password(url)


def _reason(exc: BaseException) -> str:
    """The driver's message, without SQLAlchemy's statement and parameters."""
    return first_line(str(getattr(exc, "orig", None) or exc), type(exc).__name__)


GATHER_S = 0.05
"""How long the writer gathers records after the first before it commits them together (unless
someone is waiting for them in `flush`)."""


class Store:
    """One database, opened once per process. Its tables are read and written through the
    repositories it holds: `runs`, `trials`, `iterations`, `proposals`, `ledger`, `nightlies`,
    `calibrations` and `cache`.

    Trial records, ledger entries and cache entries are written by one background writer that
    commits whatever has queued up within `GATHER_S` in a single transaction, a statement per
    table (SQLite has one writer; a transaction, or a statement, per row costs more than the
    row). A record reaches the database at most `GATHER_S` after it is queued; `flush()` cuts
    that short and waits for it, and every run-level write flushes first, so a finished run is
    all on disk.

    A SQLite store is checked (`PRAGMA quick_check`) when opened, and a corrupt one refused.
    After that every database error, in any thread, is raised as a `StoreError`: the run stops
    on it rather than recording the trial that happened to read the cache as errored.

    A PostgreSQL store (`postgresql+psycopg://...`) is shared: processes on several machines may
    write to it at once, each through its own `Store`. Its sessions use UTC, so times read back
    are the same for every member of a team (SQLite gives them back without a zone, also UTC).
    """

    def __init__(self, url: str):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        sqlite = url.startswith("sqlite")
        # a server restarted between two calls leaves the pool's connections dead: each is tested
        # (one round trip) when taken from the pool, and a dead one is replaced
        self.engine: Engine = create_engine(url, connect_args={"check_same_thread": False} if sqlite else {},
                                            pool_pre_ping=not sqlite)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        elif self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgresql_session)
        self._lock = threading.Lock()
        try:
            with sqlite_lock(url):  # a new file's switch to WAL, and its migration, one opener at a time
                self._check_integrity()
                with self.engine.begin() as conn:
                    migrate(conn)
        except DatabaseError as exc:
            if not any(marker in _reason(exc).lower() for marker in CORRUPTION):
                raise  # e.g. a folder it cannot write: `open_store` names the setting to change
            raise store_error(url, _reason(exc)) from None
        event.listen(self.engine, "handle_error", self._raise_store_error)
        self._queue: queue.Queue = queue.Queue()
        self._writer: threading.Thread | None = None
        self._writer_error: BaseException | None = None
        self._flushing = threading.Event()
        self.runs = Runs(self)
        self.trials = Trials(self)
        self.iterations = Iterations(self)
        self.proposals = Proposals(self)
        self.ledger = LedgerEntries(self)
        self.nightlies = Nightlies(self)
        self.calibrations = Calibrations(self)
        self.cache = CachedResponses(self)
        self.heartbeat = Heartbeat(self._beat)
        self._close_orphans()

    def close(self) -> None:
        self.heartbeat.stop()
        self.flush()
        self.engine.dispose()

    def owned(self) -> dict[str, Any]:
        """The owner columns of a row this process starts or adopts; its heartbeat runs from now."""
        self.heartbeat.start()
        return {**this_process(), "heartbeat_at": datetime.now(timezone.utc)}

    def _beat(self) -> None:
        with self.engine.begin() as conn:
            for table in (schema.runs, schema.iterations):
                stamp_heartbeat(conn, table)

    def _close_orphans(self) -> None:
        """Close as `interrupted` every running run and iteration whose owner is gone (killed, or
        its machine silent past the lease): whichever command opens the store next does it."""
        with self.engine.begin() as conn:
            close_gone(conn, schema.runs.c.run_id)
            close_gone(conn, schema.iterations.c.iteration_id)

    def _check_integrity(self) -> None:
        """Refuse a SQLite file with damaged pages before anything reads it. `quick_check` reads
        every page once (a second or so for a store of hundreds of MB) but skips the slower
        index-against-table comparison of `integrity_check`.

        Other databases are not checked here: a server (PostgreSQL) owns its files, checks its
        pages as it reads them (with data checksums on) and reports damage as an error of the
        query that met it, which then stops the run like any other store error."""
        if self.engine.dialect.name != "sqlite":
            return
        with self.engine.connect() as conn:
            problems = [row[0] for row in conn.exec_driver_sql("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise store_error(self.url, f"PRAGMA quick_check found {len(problems)} problem(s), first: "
                                        f"{problems[0]} (corrupt pages)")

    def _raise_store_error(self, context) -> None:
        """SQLAlchemy's `handle_error` hook: a database error becomes the StoreError that stops the
        run, wherever it happens (a trial reading the cache, the writer, a report); except the pool's
        test of a connection it hands out (`pool_pre_ping`), after which a dead one is replaced."""
        if isinstance(context.sqlalchemy_exception, DBAPIError) and not context.is_pre_ping:
            raise store_error(self.url, _reason(context.original_exception)) from context.original_exception

    # ------------------------------------------------------------------ writer
    def enqueue(self, kind: str, payload: Any) -> None:
        """Queue a record for the writer: a `trial`, a `ledger` entry or a `cache` entry."""
        self._raise_writer_error()  # a failed writer stops the run at its next record
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="store-writer", daemon=True)
                self._writer.start()
        self._queue.put((kind, payload))

    def flush(self) -> None:
        """Block until everything queued is committed; re-raise a failure of the writer."""
        if self._writer is not None:
            self._flushing.set()  # the writer stops gathering and commits now
            self._queue.join()
        self._raise_writer_error()

    def _raise_writer_error(self) -> None:
        if self._writer_error is not None:
            error, self._writer_error = self._writer_error, None
            raise error

    def _write_loop(self) -> None:
        from optimizer.store._writes import write_batch  # its dialect imports cost readers ~20 ms

        while True:
            batch = [self._queue.get()]
            if not self._flushing.is_set():
                self._flushing.wait(GATHER_S)
            self._flushing.clear()
            while len(batch) < 500:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                with self.engine.begin() as conn:
                    write_batch(conn, batch)
            except BaseException as exc:  # surfaced by the next record or flush()
                self._writer_error = exc
            finally:
                for kind, payload in batch:
                    if kind == "cache":
                        self.cache.written(payload[0])
                    self._queue.task_done()

    def count(self, table: str) -> int:
        """How many rows the table named `table` holds."""
        self.flush()
        with self.engine.connect() as conn:
            return len(conn.execute(select(schema.metadata.tables[table])).all())


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _postgresql_session(dbapi_connection, _record) -> None:
    """Every session in UTC, committed so that the pool's rollback on check-in keeps it."""
    dbapi_connection.execute("SET TIME ZONE 'UTC'")
    dbapi_connection.commit()
