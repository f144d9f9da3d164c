"""The viewer's queries: read-only, each page one or a few statements with a LIMIT.

The viewer opens the store itself rather than through `Store`: `Store` migrates, checks and
closes orphaned runs when it opens, all writes. Here a SQLite file is opened with `mode=ro`
(SQLite refuses every write) and a PostgreSQL session is set read-only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, and_, case, create_engine, event, func, or_, select
from sqlalchemy.exc import DBAPIError

from optimizer.errors import ConfigError, InputError, first_line
from optimizer.store import schema
from optimizer.store.address import connect_read_only
from optimizer.store.migrations import refuse_newer
from optimizer.store.store import store_error, store_location

PAGE = 50
"""Rows per page of a list (runs, iterations, trials)."""
PAIRS_PAGE = 10
"""Changed pairs per page: each shows two transcripts."""
ENDING_CHARS = 40


def open_engine(url: str) -> Engine:
    """A read-only engine on the store at `url`, checked to be a store this optimizer reads (`_check`);
    a SQLite file that is not there is an input error."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"no store at {path}", path=path,
                             fix="run `optimizer eval` or `optimizer run` first, or set state_dir "
                                 "(env OPTIMIZER_STATE_DIR) to the folder holding optimizer.db")
        return _check(create_engine("sqlite://", creator=lambda: connect_read_only(path, check_same_thread=False)),
                      url)
    engine = create_engine(url, pool_pre_ping=True)  # a restarted server: dead pooled connections are replaced

    @event.listens_for(engine, "connect")
    def _read_only(dbapi_connection, _record) -> None:
        """Committed, so that the pool's rollback on check-in keeps it (as the store's UTC)."""
        dbapi_connection.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        dbapi_connection.execute("SET TIME ZONE 'UTC'")
        dbapi_connection.commit()
    try:
        engine.connect().close()
    except DBAPIError as exc:
        engine.dispose()
        raise InputError(f"cannot open the store at {store_location(url)}: {first_line(str(exc.orig), 'error')}",
                         field="database_url", fix="point database_url at a reachable database") from None
    return _check(engine, url)


def _check(engine: Engine, url: str) -> Engine:
    """`engine`, once its store answers with a schema this optimizer knows: a damaged file is the
    store error the other commands give (exit 3), a newer store's schema a settings error, before
    a page is served or written."""
    try:
        with engine.connect() as conn:
            stored = conn.execute(select(func.max(schema.schema_version.c.version))).scalar()
        refuse_newer(stored, store_location(url))
    except DBAPIError as exc:
        engine.dispose()
        raise store_error(url, first_line(str(exc.orig), "error")) from None
    except ConfigError:
        engine.dispose()
        raise
    return engine


def ending(error: str | None) -> str:
    """How a trial ended, short: `completed`, or its error up to the first colon."""
    if not error:
        return "completed"
    return error.split(":", 1)[0].strip()[:ENDING_CHARS] or "error"


class Reader:
    """Every read the viewer's pages make."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def _rows(self, statement) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row) for row in conn.execute(statement).mappings().all()]

    def runs(self, page: int) -> list[dict[str, Any]]:
        r, t = schema.runs, schema.trials
        counts = (select(t.c.run_id, func.count().label("trials"),
                         func.sum(case((t.c.status == "passed", 1), else_=0)).label("passed"),
                         func.sum(t.c.prompt_tokens + t.c.completion_tokens).label("tokens"),
                         func.sum(t.c.cost_usd).label("cost_usd"), func.avg(t.c.duration_s).label("mean_s"))
                  .group_by(t.c.run_id).subquery())
        statement = (select(r.c.run_id, r.c.kind, r.c.status, r.c.started_at, counts.c.trials, counts.c.passed,
                            counts.c.tokens, counts.c.cost_usd, counts.c.mean_s, r.c.settings_json,
                            r.c.fingerprints_json)
                     .outerjoin(counts, counts.c.run_id == r.c.run_id)
                     .order_by(r.c.started_at.desc()).limit(PAGE + 1).offset(page * PAGE))
        rows = self._rows(statement)
        for row in rows:
            row.update(described(row.pop("settings_json"), row.pop("fingerprints_json")))
        return rows

    def count(self, table: str) -> int:
        """Rows of `runs`, `iterations` or `nightlies`: the totals the pages show beside paging."""
        return self._scalar(select(func.count()).select_from(getattr(schema, table)))

    def _scalar(self, statement) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(statement).scalar()

    def usage(self, run_id: str) -> dict[str, Any]:
        """A run's trials, tokens, cost and latency (mean and slowest trial)."""
        t = schema.trials
        return self._rows(select(func.count().label("trials"), func.sum(t.c.prompt_tokens).label("prompt_tokens"),
                                 func.sum(t.c.completion_tokens).label("completion_tokens"),
                                 func.sum(t.c.cost_usd).label("cost_usd"), func.sum(t.c.model_calls).label("calls"),
                                 func.sum(t.c.cache_hits).label("cache_hits"), func.avg(t.c.duration_s).label("mean_s"),
                                 func.max(t.c.duration_s).label("max_s")).where(t.c.run_id == run_id))[0]

    def nights(self, page: int) -> list[dict[str, Any]]:
        n = schema.nightlies
        return self._rows(select(n.c.nightly_id, n.c.branch, n.c.status, n.c.started_at, n.c.state_json)
                          .order_by(n.c.started_at.desc()).limit(PAGE + 1).offset(page * PAGE))

    def night(self, nightly_id: str) -> dict[str, Any] | None:
        rows = self._rows(select(schema.nightlies).where(schema.nightlies.c.nightly_id == nightly_id))
        return rows[0] if rows else None

    def night_of(self, iteration_id: str) -> str | None:
        """The night whose iterations include `iteration_id` (the newest such), if any."""
        n = schema.nightlies
        for row in self._rows(select(n.c.nightly_id, n.c.state_json)
                              .where(n.c.state_json.contains(json.dumps(iteration_id)))
                              .order_by(n.c.started_at.desc()).limit(5)):
            state = json.loads(row["state_json"] or "{}")
            if any(item.get("iteration_id") == iteration_id for item in state.get("iterations") or []) \
                    or state.get("watch_iteration") == iteration_id:
                return row["nightly_id"]
        return None

    def search(self, text: str, page: int) -> list[dict[str, Any]]:
        """One page of trials whose transcript or outcome holds `text` (any case), newest first,
        each with the first place it occurs."""
        t = schema.trials
        found = self._rows(select(t.c.id, t.c.run_id, t.c.suite, t.c.task_id, t.c.bucket, t.c.trial_index, t.c.status,
                                  t.c.score, t.c.transcript_json, t.c.outcome_json)
                           .where(or_(t.c.transcript_json.icontains(text, autoescape=True),
                                      t.c.outcome_json.icontains(text, autoescape=True)))
                           .order_by(t.c.id.desc()).limit(PAGE + 1).offset(page * PAGE))
        for row in found:
            row["context"] = _context(row.pop("transcript_json") + "\n" + row.pop("outcome_json"), text)
        return found

    def iterations(self, page: int) -> list[dict[str, Any]]:
        i = schema.iterations
        return self._rows(select(i.c.iteration_id, i.c.status, i.c.started_at, i.c.agent, i.c.targets_json,
                                 i.c.baseline_run_id).order_by(i.c.started_at.desc())
                          .limit(PAGE + 1).offset(page * PAGE))

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self._rows(select(schema.runs).where(schema.runs.c.run_id == run_id))
        return rows[0] if rows else None

    def buckets(self, run_id: str) -> list[dict[str, Any]]:
        """Per suite, bucket and split of a run: trials by status."""
        t = schema.trials
        return self._rows(select(t.c.suite, t.c.bucket, t.c.split, t.c.status, func.count().label("n"))
                          .where(t.c.run_id == run_id).group_by(t.c.suite, t.c.bucket, t.c.split, t.c.status)
                          .order_by(t.c.suite, t.c.bucket, t.c.split))

    def endings(self, run_id: str) -> list[str]:
        t = schema.trials
        rows = self._rows(select(t.c.error).where(t.c.run_id == run_id).distinct().limit(500))
        return sorted({ending(row["error"]) for row in rows})

    def trials(self, run_id: str, filters: dict[str, str], page: int) -> tuple[list[dict[str, Any]], int]:
        """One page of a run's trials (no transcripts), filtered by suite, bucket, outcome
        (status), ending and task (a substring of its id), and how many match in all."""
        t = schema.trials
        conditions = [t.c.run_id == run_id]
        for name, column in (("suite", t.c.suite), ("bucket", t.c.bucket), ("outcome", t.c.status),
                             ("split", t.c.split)):
            if filters.get(name):
                conditions.append(column == filters[name])
        if filters.get("task"):
            conditions.append(t.c.task_id.contains(filters["task"], autoescape=True))
        if filters.get("ending") == "completed":
            conditions.append(or_(t.c.error.is_(None), t.c.error == ""))
        elif filters.get("ending"):
            conditions.append(t.c.error.startswith(filters["ending"], autoescape=True))
        statement = (select(t.c.id, t.c.suite, t.c.task_id, t.c.bucket, t.c.split, t.c.trial_index, t.c.status,
                            t.c.score, t.c.error, t.c.duration_s, (t.c.prompt_tokens + t.c.completion_tokens)
                            .label("tokens"), t.c.cost_usd)
                     .where(and_(*conditions)).order_by(t.c.id).limit(PAGE + 1).offset(page * PAGE))
        total = self._scalar(select(func.count()).select_from(t).where(and_(*conditions)))
        return self._rows(statement), total

    def trial(self, trial_id: int) -> dict[str, Any] | None:
        rows = self._rows(select(schema.trials).where(schema.trials.c.id == trial_id))
        if not rows:
            return None
        row = rows[0]
        row["transcript"] = json.loads(row.pop("transcript_json"))
        row["outcome"] = json.loads(row.pop("outcome_json"))
        row["graders"] = self._rows(select(schema.grader_results).where(schema.grader_results.c.trial_id == trial_id)
                                    .order_by(schema.grader_results.c.id))
        return row

    def iteration(self, iteration_id: str) -> dict[str, Any] | None:
        rows = self._rows(select(schema.iterations).where(schema.iterations.c.iteration_id == iteration_id))
        return rows[0] if rows else None

    def proposals(self, iteration_id: str) -> list[dict[str, Any]]:
        p = schema.proposals
        return self._rows(select(p.c.ordinal, p.c.branch, p.c.status, p.c.reason, p.c.diff, p.c.candidate_run_id,
                                 p.c.rationale, p.c.decision_json, p.c.created_at)
                          .where(p.c.iteration_id == iteration_id).order_by(p.c.ordinal))

    def base_runs(self, iteration: dict[str, Any]) -> list[str]:
        """The runs holding the base prompt's trials an iteration's gate paired with its
        candidates: the confirm runs its summary names (its own, then the earlier ones on the same
        base it took in), then its baseline. A record from before the summary named them: the
        confirm runs inside the iteration's time window."""
        baseline = [iteration["baseline_run_id"]] if iteration.get("baseline_run_id") else []
        named = (json.loads(iteration.get("summary_json") or "null") or {}).get("base_runs")
        if named is not None:
            return [*named, *baseline]
        r = schema.runs
        window = [r.c.kind == "confirm", r.c.started_at >= iteration["started_at"]]
        if iteration.get("finished_at") is not None:
            window.append(r.c.started_at <= iteration["finished_at"])
        confirms = [row["run_id"] for row in self._rows(select(r.c.run_id).where(and_(*window))
                                                        .order_by(r.c.started_at))]
        return confirms + baseline

    def changed_pairs(self, base_runs: list[str], candidate_run: str) -> list[dict[str, Any]]:
        """Every pair (suite, task, trial index) whose outcome differs, base trial against the
        candidate's (the first base run holding a pair wins): `base` and `candidate` trial ids,
        `suite`, `bucket` and `direction` (`down`: the base passed and the candidate did not;
        `up`: the reverse; `other`: failed against errored). Regressions first, then the rest,
        each in the candidate's order."""
        t = schema.trials
        columns = (t.c.id, t.c.run_id, t.c.suite, t.c.task_id, t.c.bucket, t.c.trial_index, t.c.status)
        base: dict[tuple, tuple[int, str]] = {}
        rank = {run_id: n for n, run_id in enumerate(base_runs)}
        best: dict[tuple, int] = {}
        for row in self._rows(select(*columns).where(t.c.run_id.in_(base_runs))):
            key = (row["suite"], row["task_id"], row["trial_index"])
            if key not in best or rank[row["run_id"]] < best[key]:
                best[key] = rank[row["run_id"]]
                base[key] = (row["id"], row["status"])
        pairs = []
        for row in self._rows(select(*columns).where(t.c.run_id == candidate_run).order_by(t.c.id)):
            found = base.get((row["suite"], row["task_id"], row["trial_index"]))
            if found is None or found[1] == row["status"]:
                continue
            direction = "down" if found[1] == "passed" else "up" if row["status"] == "passed" else "other"
            pairs.append({"base": found[0], "candidate": row["id"], "suite": row["suite"], "bucket": row["bucket"],
                          "direction": direction})
        order = {"down": 0, "other": 1, "up": 2}
        return sorted(pairs, key=lambda pair: order[pair["direction"]])


def described(settings_json: str | None, fingerprints_json: str | None) -> dict[str, str]:
    """What a run measured, for a reader of its id: its agent model, suites and commit."""
    settings = json.loads(settings_json or "null") or {}
    spec = json.loads(fingerprints_json or "null") or {}
    commit = ((spec.get("git") or {}).get("commit") or "")[:12]
    return {"model": settings.get("agent_model") or (spec.get("models") or {}).get("agent") or "",
            "suites": ", ".join(settings.get("suites") or []), "commit": commit}


CONTEXT_CHARS = 80
"""Characters shown either side of a search hit."""


def _context(text: str, needle: str) -> str:
    """The stretch of `text` around the first occurrence of `needle` (any case)."""
    at = text.lower().find(needle.lower())
    if at < 0:
        return ""
    start, end = max(0, at - CONTEXT_CHARS), at + len(needle) + CONTEXT_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
