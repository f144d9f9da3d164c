"""Reading and writing run records. SQLite by default; PostgreSQL for a team (docs/postgresql.md)."""

from __future__ import annotations

import json
import queue
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, func, insert, make_url, select, update
from sqlalchemy.exc import DatabaseError, DBAPIError

from optimizer.errors import StoreError, first_line
from optimizer.store import schema
from optimizer.store.migrations import migrate
from optimizer.types import GraderResult, Outcome, RunResult, Transcript, Trial

if TYPE_CHECKING:  # `_frame` imports pandas when called, so opening a store stays cheap
    import pandas as pd


def default_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / 'optimizer.db'}"


def open_store(settings, project_root: Path) -> "Store":
    """The project's store: `database_url` when set, else SQLite in the state folder. A store that
    cannot be opened is a configuration error naming the setting to change."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from optimizer.errors import ConfigError

    url = settings.database_url or default_url(project_root / settings.state_dir)
    field = "database_url" if settings.database_url else "state_dir"
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
                          fix="point it at a writable folder or a reachable database") from None


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
    return make_url(url).render_as_string(hide_password=True)


def _reason(exc: BaseException) -> str:
    """The driver's message, without SQLAlchemy's statement and parameters."""
    return first_line(str(getattr(exc, "orig", None) or exc), type(exc).__name__)


UNFINISHED = ("running", "interrupted", "stopped", "crashed")
"""Statuses of a run that did not get to the end of its trials."""

GATHER_S = 0.05
"""How long the writer gathers records after the first before it commits them together (unless
someone is waiting for them in `flush`)."""


class Store:
    """One database, opened once per process.

    Trial records and cache entries are written by one background writer that commits whatever
    has queued up within `GATHER_S` in a single transaction, a statement per table (SQLite has
    one writer; a transaction, or a statement, per row costs more than the row). A record reaches
    the database at most `GATHER_S` after it is queued; `flush()` cuts that short and waits for
    it, and every run-level write flushes first, so a finished run is all on disk.

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
        self.engine: Engine = create_engine(url, connect_args={"check_same_thread": False}
                                            if url.startswith("sqlite") else {})
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        elif self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgresql_session)
        self._lock = threading.Lock()
        try:
            self._check_integrity()
            with self.engine.begin() as conn:
                migrate(conn)
        except DatabaseError as exc:
            if not any(marker in _reason(exc).lower() for marker in CORRUPTION):
                raise  # e.g. a folder it cannot write: `open_store` names the setting to change
            raise store_error(url, _reason(exc)) from None
        event.listen(self.engine, "handle_error", self._raise_store_error)
        self._queue: queue.Queue = queue.Queue()
        self._pending_cache: dict[str, dict[str, Any]] = {}
        self._writer: threading.Thread | None = None
        self._writer_error: BaseException | None = None
        self._flushing = threading.Event()
        self._cache_keys: set[str] | None = None

    def close(self) -> None:
        self.flush()
        self.engine.dispose()

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
        run, wherever it happens (a trial reading the cache, the writer, a report)."""
        if isinstance(context.sqlalchemy_exception, DBAPIError):
            raise store_error(self.url, _reason(context.original_exception)) from context.original_exception

    # ------------------------------------------------------------------ writer
    def _enqueue(self, kind: str, payload: Any) -> None:
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
                        self._pending_cache.pop(payload[0], None)
                    self._queue.task_done()

    # ------------------------------------------------------------------ runs
    def start_run(self, run: RunResult, kind: str = "eval") -> None:
        self.flush()
        with self.engine.begin() as conn:
            conn.execute(insert(schema.runs).values(
                run_id=run.run_id, kind=kind, status="running", started_at=run.started_at,
                settings_json=json.dumps(run.settings, default=str),
                fingerprints_json=json.dumps(run.fingerprints, default=str)))

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        self.flush()
        with self.engine.begin() as conn:
            conn.execute(update(schema.runs).where(schema.runs.c.run_id == run_id).values(
                status=status, finished_at=datetime.now(timezone.utc),
                summary_json=json.dumps(summary, default=str)))

    def record_trial(self, run_id: str, trial: Trial) -> None:
        self._enqueue("trial", (run_id, trial))

    def has_run(self, run_id: str) -> bool:
        self.flush()
        with self.engine.connect() as conn:
            return conn.execute(select(schema.runs.c.run_id).where(schema.runs.c.run_id == run_id)).first() is not None

    def run_record(self, run_id: str) -> dict[str, Any] | None:
        self.flush()
        with self.engine.connect() as conn:
            row = conn.execute(select(schema.runs).where(schema.runs.c.run_id == run_id)).mappings().first()
        return _decode_run(row) if row else None

    def find_reusable_run(self, fingerprints: dict[str, Any], trial_count: int) -> str | None:
        """The newest completed run with exactly these fingerprints and every planned trial."""
        wanted = json.dumps(fingerprints, sort_keys=True, default=str)
        self.flush()
        with self.engine.connect() as conn:
            rows = conn.execute(select(schema.runs.c.run_id, schema.runs.c.fingerprints_json)
                                .where(schema.runs.c.status == "completed")
                                .order_by(schema.runs.c.started_at.desc())).all()
            for run_id, stored in rows:
                if json.dumps(json.loads(stored), sort_keys=True, default=str) != wanted:
                    continue
                count = conn.execute(select(func.count()).select_from(schema.trials)
                                     .where(schema.trials.c.run_id == run_id)).scalar_one()
                if count == trial_count:
                    return run_id
        return None

    def find_unfinished_run(self, fingerprints: dict[str, Any], kind: str) -> str | None:
        """The newest run of this kind that never finished (its process was killed, interrupted,
        stopped by a budget or crashed) and has exactly these fingerprints: its recorded trials
        can be kept and only the rest run."""
        wanted = json.dumps(fingerprints, sort_keys=True, default=str)
        self.flush()
        with self.engine.connect() as conn:
            rows = conn.execute(select(schema.runs.c.run_id, schema.runs.c.fingerprints_json)
                                .where(schema.runs.c.status.in_(UNFINISHED), schema.runs.c.kind == kind)
                                .order_by(schema.runs.c.started_at.desc())).all()
        for run_id, stored in rows:
            if json.dumps(json.loads(stored), sort_keys=True, default=str) == wanted:
                return run_id
        return None

    def recorded_trials(self, run_id: str) -> set[tuple[str, str, int]]:
        """(suite, task id, trial index) of every trial recorded under the run."""
        self.flush()
        table = schema.trials
        with self.engine.connect() as conn:
            rows = conn.execute(select(table.c.suite, table.c.task_id, table.c.trial_index)
                                .where(table.c.run_id == run_id)).all()
        return {(suite, task, index) for suite, task, index in rows}

    def load_trials(self, run_id: str) -> list[Trial]:
        """The full trial records of a run, grader results included, in recording order."""
        self.flush()
        with self.engine.connect() as conn:
            rows = conn.execute(select(schema.trials).where(schema.trials.c.run_id == run_id)
                                .order_by(schema.trials.c.id)).mappings().all()
            graders = conn.execute(select(schema.grader_results)
                                   .where(schema.grader_results.c.trial_id.in_([row["id"] for row in rows]))
                                   .order_by(schema.grader_results.c.id)).mappings().all() if rows else []
        by_trial: dict[int, list[GraderResult]] = {}
        for row in graders:
            by_trial.setdefault(row["trial_id"], []).append(GraderResult(
                grader=row["grader"], score=row["score"], passed=row["passed"], errored=row["errored"],
                rationale=row["rationale"], details=json.loads(row["details_json"])))
        return [Trial(suite=row["suite"], task_id=row["task_id"], bucket=row["bucket"], split=row["split"],
                      index=row["trial_index"], status=row["status"], score=row["score"], error=row["error"],
                      duration_s=row["duration_s"],
                      transcript=Transcript.model_validate_json(row["transcript_json"]),
                      outcome=Outcome.model_validate_json(row["outcome_json"]),
                      grader_results=by_trial.get(row["id"], []))
                for row in rows]

    # ------------------------------------------------------------ iterations
    def start_iteration(self, **values: Any) -> None:
        self.flush()
        with self.engine.begin() as conn:
            conn.execute(insert(schema.iterations).values(
                status="running", started_at=datetime.now(timezone.utc), **_encode(values)))

    def update_iteration(self, iteration_id: str, **values: Any) -> None:
        self._update_job(schema.iterations.c.iteration_id, iteration_id, values)

    def _update_job(self, key, value: str, values: dict[str, Any]) -> None:
        """Update one iteration or nightly row; leaving `running` stamps `finished_at`."""
        self.flush()
        if values.get("status") and values["status"] != "running":
            values.setdefault("finished_at", datetime.now(timezone.utc))
        with self.engine.begin() as conn:
            conn.execute(update(key.table).where(key == value).values(**_encode(values)))

    def record_proposal(self, **values: Any) -> int:
        self.flush()
        with self.engine.begin() as conn:
            return conn.execute(insert(schema.proposals).values(
                created_at=datetime.now(timezone.utc), **_encode(values))).inserted_primary_key[0]

    def update_proposal(self, proposal_id: int, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(schema.proposals).where(schema.proposals.c.id == proposal_id)
                         .values(**_encode(values)))

    def rejected_proposals(self, agent: str | None = None) -> list[dict[str, Any]]:
        """Rejected proposals (of one agent, or all), oldest first, each with its iteration's
        targets and base commit."""
        proposals, iterations = schema.proposals, schema.iterations
        query = (select(proposals.c.id, proposals.c.iteration_id, proposals.c.status, proposals.c.reason,
                        proposals.c.rationale, proposals.c.diff, proposals.c.created_at, iterations.c.targets_json,
                        iterations.c.base_commit)
                 .join(iterations, iterations.c.iteration_id == proposals.c.iteration_id)
                 .where(proposals.c.status.like("rejected%"))
                 .order_by(proposals.c.id))
        if agent:
            query = query.where(proposals.c.agent == agent)
        self.flush()
        with self.engine.connect() as conn:
            return [_decode_run(row) for row in conn.execute(query).mappings().all()]

    def iteration(self, iteration_id: str) -> dict[str, Any] | None:
        self.flush()
        with self.engine.connect() as conn:
            row = conn.execute(select(schema.iterations).where(schema.iterations.c.iteration_id == iteration_id)
                               ).mappings().first()
        return _decode_run(row) if row else None

    def ledger_total(self, **where: str) -> tuple[float, int]:
        """(cost, tokens) of the ledger rows matching, e.g. nightly_id=..."""
        table = schema.ledger
        query = select(func.coalesce(func.sum(table.c.cost_usd), 0.0),
                       func.coalesce(func.sum(table.c.prompt_tokens + table.c.completion_tokens), 0))
        for column, value in where.items():
            query = query.where(table.c[column] == value)
        self.flush()
        with self.engine.connect() as conn:
            cost, tokens = conn.execute(query).one()
        return float(cost), int(tokens)

    def iterations(self) -> list[dict[str, Any]]:
        self.flush()
        with self.engine.connect() as conn:
            rows = conn.execute(select(schema.iterations).order_by(schema.iterations.c.started_at)).mappings().all()
        return [_decode_run(row) for row in rows]

    def proposals(self, *, iteration_id: str | None = None, branch: str | None = None) -> list[dict[str, Any]]:
        query = select(schema.proposals).order_by(schema.proposals.c.id)
        if iteration_id:
            query = query.where(schema.proposals.c.iteration_id == iteration_id)
        if branch:
            query = query.where(schema.proposals.c.branch == branch)
        self.flush()
        with self.engine.connect() as conn:
            return [_decode_run(row) for row in conn.execute(query).mappings().all()]

    # ------------------------------------------------------------------ ledger
    def record_ledger(self, row: dict[str, Any]) -> None:
        self._enqueue("ledger", (row,))

    def ledger_frame(self, **where: str) -> pd.DataFrame:
        """Ledger rows (optionally of one run, iteration or nightly job) as a DataFrame."""
        query = select(schema.ledger).order_by(schema.ledger.c.id)
        for column, value in where.items():
            query = query.where(schema.ledger.c[column] == value)
        return self._frame(query)

    def ledger_sums(self, key: str | None = None) -> list[dict[str, Any]]:
        """The ledger summed in the database per role, and per `key` (a column such as
        `iteration_id`) when given: rows of `key` (None without one), `role`, `cost_usd`,
        `tokens` (prompt + completion) and `calls`. Plain rows for readers that must stay quick
        (`optimizer history`): the ledger holds a row per model call."""
        table = schema.ledger
        groups = [table.c[key], table.c.role] if key else [table.c.role]
        query = (select(*([table.c[key].label("key")] if key else []), table.c.role,
                        func.sum(table.c.cost_usd).label("cost_usd"),
                        func.sum(table.c.prompt_tokens + table.c.completion_tokens).label("tokens"),
                        func.sum(table.c.calls).label("calls"))
                 .group_by(*groups).order_by(*groups))
        self.flush()
        with self.engine.connect() as conn:
            return [{"key": None, **row} for row in conn.execute(query).mappings().all()]

    # ------------------------------------------------------------ nightly jobs
    def start_nightly(self, **values: Any) -> None:
        self.flush()
        with self.engine.begin() as conn:
            conn.execute(insert(schema.nightlies).values(started_at=datetime.now(timezone.utc), **_encode(values)))

    def update_nightly(self, nightly_id: str, **values: Any) -> None:
        self._update_job(schema.nightlies.c.nightly_id, nightly_id, values)

    def nightlies(self) -> list[dict[str, Any]]:
        self.flush()
        with self.engine.connect() as conn:
            rows = conn.execute(select(schema.nightlies).order_by(schema.nightlies.c.started_at)).mappings().all()
        return [_decode_run(row) for row in rows]

    # ------------------------------------------------------- judge calibration
    def record_calibration(self, **values: Any) -> None:
        self.flush()
        with self.engine.begin() as conn:
            conn.execute(insert(schema.judge_calibrations).values(created_at=datetime.now(timezone.utc),
                                                                  **_encode(values)))

    def latest_calibration(self, judge: str, model: str, rubric_hash: str) -> dict[str, Any] | None:
        table = schema.judge_calibrations
        self.flush()
        with self.engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.judge == judge, table.c.model == model,
                                                   table.c.rubric_hash == rubric_hash)
                               .order_by(table.c.id.desc()).limit(1)).mappings().first()
        return _decode_run(row) if row else None

    def run_rows(self, *columns: str, last: int | None = None) -> list[dict[str, Any]]:
        """Runs, oldest first, as dicts whose JSON columns are decoded (`summary_json` read as
        `summary`). Name `columns` to read only those (decoding every run's summary costs on a
        large store); `last` keeps only the newest so many."""
        table = schema.runs
        query = select(*(table.c[name] for name in columns)) if columns else select(table)
        order = (table.c.started_at, table.c.run_id)
        query = query.order_by(*(column.desc() for column in order)).limit(last) if last else query.order_by(*order)
        self.flush()
        with self.engine.connect() as conn:
            rows = [_decode_run(row) for row in conn.execute(query).mappings().all()]
        return rows[::-1] if last else rows

    def runs_frame(self) -> pd.DataFrame:
        return self._frame(select(schema.runs).order_by(schema.runs.c.started_at))

    def trials_frame(self, run_id: str) -> pd.DataFrame:
        columns = [c for c in schema.trials.c if c.name not in ("transcript_json", "outcome_json")]
        return self._frame(select(*columns).where(schema.trials.c.run_id == run_id).order_by(schema.trials.c.id))

    def _frame(self, query) -> pd.DataFrame:
        """A query's rows as a DataFrame; pandas is imported here, on the first table asked for."""
        import pandas as pd

        self.flush()
        with self.engine.connect() as conn:
            return pd.read_sql(query, conn)

    def count(self, table: str) -> int:
        self.flush()
        with self.engine.connect() as conn:
            return len(conn.execute(select(schema.metadata.tables[table])).all())

    # ----------------------------------------------------------- response cache
    def get(self, key: str) -> dict[str, Any] | None:
        pending = self._pending_cache.get(key)
        if pending is not None:
            return pending
        if key not in self.cache_keys():
            return None  # a miss costs no query: the keys were read once
        return self.cached_value(key)

    def cache_keys(self) -> set[str]:
        """The keys of every cache entry, read from the database once, then kept up to date."""
        if self._cache_keys is None:
            with self._lock, self.engine.connect() as conn:
                self._cache_keys = set(conn.execute(select(schema.response_cache.c.key)).scalars())
        return self._cache_keys

    def cached_value(self, key: str) -> dict[str, Any] | None:
        """One stored cache entry, read from the database."""
        with self.engine.connect() as conn:
            row = conn.execute(select(schema.response_cache.c.value_json)
                               .where(schema.response_cache.c.key == key)).first()
        return json.loads(row[0]) if row else None

    def put(self, key: str, model: str, value: dict[str, Any]) -> None:
        self._pending_cache.setdefault(key, value)
        if self._cache_keys is not None:
            self._cache_keys.add(key)
        self._enqueue("cache", (key, model, value))

def _encode(values: dict[str, Any]) -> dict[str, Any]:
    """`foo_json` columns take any JSON-ready value."""
    return {key: (json.dumps(value, default=str, ensure_ascii=False)
                  if key.endswith("_json") and not isinstance(value, str) and value is not None else value)
            for key, value in values.items()}


def _decode_run(row) -> dict[str, Any]:
    record = dict(row)
    for key in list(record):
        if key.endswith("_json") and isinstance(record[key], str):
            record[key.removesuffix("_json")] = json.loads(record.pop(key))
    return record


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _postgresql_session(dbapi_connection, _record) -> None:
    """Every session in UTC, committed so that the pool's rollback on check-in keeps it."""
    dbapi_connection.execute("SET TIME ZONE 'UTC'")
    dbapi_connection.commit()
