"""The viewer's pages: each a function of the reader and the request's path and query that
returns the status and the HTML. Everything shown passes through Jinja's autoescape; a
transcript is untrusted text and is never marked safe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

import jinja2

from optimizer.reporting.decision_view import decision_view
from optimizer.proposal.diffs import kinds
from optimizer.reporting.trends import trends
from optimizer.viewer.reader import PAGE, PAIRS_PAGE, Reader, described, ending

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
FILTERS = ("suite", "bucket", "split", "outcome", "ending", "task")


class NotFound(Exception):
    """404: no such run, trial, iteration or page."""


class BadRequest(Exception):
    """400: an id or a number that cannot be one."""


SHOWN_CHARS = 20_000
"""A transcript's text (a message, a tool call's arguments or result, the outcome) is shown up to
this many characters, with a note of how many more there are: a 40 MB tool result would
otherwise make a 100 MB page."""
SHOWN_ITEMS = 300
"""Messages and tool calls shown of one transcript."""


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… {len(text) - limit:,} more characters not shown"


def environment() -> jinja2.Environment:
    # transcripts are free-form dicts: a message without `name` or `tool_calls` reads as empty
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.ChainableUndefined)
    env.filters["score"] = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "–"
    env.filters["pretty"] = lambda v: clip(v if isinstance(v, str) else json.dumps(v, indent=2, ensure_ascii=False))
    env.filters["shown"] = lambda items: list(items or [])[:SHOWN_ITEMS]
    env.filters["ending"] = ending
    env.filters["query"] = lambda params: urlencode({k: v for k, v in params.items() if v not in (None, "")})
    env.filters["difflines"] = lambda diff: [(kind if kind in ("add", "del") else "", line) for kind, line in kinds(diff)]
    return env


def _page_number(query: dict[str, str]) -> int:
    try:
        page = int(query.get("page", "0"))
    except ValueError:
        raise BadRequest("page must be a whole number") from None
    if not 0 <= page <= 1_000_000:
        raise BadRequest("page must be between 0 and 1,000,000")
    return page


def _split(rows: list[dict[str, Any]], size: int = PAGE) -> tuple[list[dict[str, Any]], bool]:
    """The page's rows and whether another page follows (the reader fetches one row more)."""
    return rows[:size], len(rows) > size


def _pages(total: int, size: int = PAGE) -> int:
    """How many pages `total` rows fill (at least one)."""
    return max(1, -(-total // size))


def home(reader: Reader, _: list[str], query: dict[str, str]) -> dict[str, Any]:
    page = _page_number(query)
    runs, more_runs = _split(reader.runs(page))
    iterations, more_iterations = _split(reader.iterations(page))
    nights, more_nights = _split(reader.nights(page))
    for row in iterations:
        row["targets"] = json.loads(row.pop("targets_json") or "[]")
    for row in nights:
        state = json.loads(row.pop("state_json") or "{}")
        row["iterations"] = len(state.get("iterations") or [])
        row["accepted"] = sum(1 for item in state.get("iterations") or [] if item.get("status") == "accepted")
        row["stop_reason"] = state.get("stop_reason", "")
    totals = {table: reader.count(table) for table in ("runs", "iterations", "nightlies")}
    return {"template": "home", "title": "Runs and iterations", "runs": runs, "iterations": iterations,
            "nights": nights, "totals": totals, "page": page, "pages": _pages(max(totals.values())),
            "more": more_runs or more_iterations or more_nights}


def run(reader: Reader, parts: list[str], query: dict[str, str]) -> dict[str, Any]:
    record = reader.run(parts[0])
    if record is None:
        raise NotFound(f"no run {parts[0]!r}")
    record.update(described(record.get("settings_json"), record.get("fingerprints_json")))
    filters = {name: query.get(name, "") for name in FILTERS}
    page = _page_number(query)
    rows, total = reader.trials(parts[0], filters, page)
    trials, more = _split(rows)
    table: dict[tuple, dict[str, Any]] = {}
    for row in reader.buckets(parts[0]):
        cell = table.setdefault((row["suite"], row["bucket"], row["split"]),
                                {"suite": row["suite"], "bucket": row["bucket"], "split": row["split"],
                                 "passed": 0, "failed": 0, "errored": 0})
        cell[row["status"]] = cell.get(row["status"], 0) + row["n"]
    return {"template": "run", "title": f"Run {record['run_id']}", "run": record, "buckets": list(table.values()),
            "trials": trials, "filters": filters, "endings": reader.endings(parts[0]), "page": page, "more": more,
            "total": total, "pages": _pages(total), "usage": reader.usage(parts[0])}


def trial(reader: Reader, parts: list[str], _: dict[str, str]) -> dict[str, Any]:
    row = reader.trial(_trial_id(parts[0]))
    if row is None:
        raise NotFound(f"no trial {parts[0]}")
    return {"template": "trial", "title": f"Trial {row['suite']}/{row['task_id']} #{row['trial_index']}", "t": row}


def _trial_id(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise BadRequest(f"a trial id is a whole number, not {text!r}")
    return int(text)


def iteration(reader: Reader, parts: list[str], _: dict[str, str]) -> dict[str, Any]:
    record = reader.iteration(parts[0])
    if record is None:
        raise NotFound(f"no iteration {parts[0]!r}")
    proposals = reader.proposals(parts[0])
    for p in proposals:
        decision = json.loads(p.pop("decision_json") or "null")
        p["decision"] = decision_view(decision) if decision else None
    record["targets"] = json.loads(record.get("targets_json") or "[]")
    record["night"] = reader.night_of(record["iteration_id"])
    return {"template": "iteration", "title": f"Iteration {record['iteration_id']}", "it": record,
            "proposals": proposals, "base_runs": reader.base_runs(record)}


DIRECTIONS = {"down": "passed -> not passed", "up": "not passed -> passed", "other": "failed <-> errored"}


def pairs(reader: Reader, parts: list[str], query: dict[str, str]) -> dict[str, Any]:
    """A proposal's pairs whose outcome changed, regressions first; `bucket` (and `suite`) and
    `direction` (down, up, other) narrow them."""
    record = reader.iteration(parts[0])
    if record is None:
        raise NotFound(f"no iteration {parts[0]!r}")
    proposals = reader.proposals(parts[0])
    # proposals are numbered across the store: the iteration's accepted one, else its first
    shown = next((p for p in proposals if p["status"] == "accepted"), proposals[0] if proposals else None)
    ordinal = query.get("proposal", str(shown["ordinal"]) if shown else "1")
    proposal = next((p for p in proposals if str(p["ordinal"]) == ordinal), None)
    if proposal is None:
        raise NotFound(f"iteration {parts[0]!r} has no proposal {ordinal!r}")
    direction = query.get("direction", "")
    if direction and direction not in DIRECTIONS:
        raise BadRequest(f"direction is one of {', '.join(DIRECTIONS)}, not {direction!r}")
    page = _page_number(query)
    every = reader.changed_pairs(reader.base_runs(record), proposal["candidate_run_id"]) \
        if proposal["candidate_run_id"] else []
    found = [pair for pair in every if (not query.get("bucket") or pair["bucket"] == query["bucket"])
             and (not query.get("suite") or pair["suite"] == query["suite"])
             and (not direction or pair["direction"] == direction)]
    counts = {name: sum(1 for pair in every if pair["direction"] == name) for name in DIRECTIONS}
    buckets = sorted({(pair["suite"], pair["bucket"]) for pair in every})
    shown = found[page * PAIRS_PAGE:(page + 1) * PAIRS_PAGE]
    filters = {"proposal": proposal["ordinal"], "suite": query.get("suite", ""), "bucket": query.get("bucket", ""),
               "direction": direction}
    return {"template": "pairs", "title": f"Changed pairs of {proposal['branch']}", "it": record,
            "proposal": proposal, "total": len(found), "all": len(every), "counts": counts, "buckets": buckets,
            "filters": filters, "directions": DIRECTIONS, "page": page, "pages": _pages(len(found), PAIRS_PAGE),
            "more": len(found) > (page + 1) * PAIRS_PAGE,
            "pairs": [(pair, reader.trial(pair["base"]), reader.trial(pair["candidate"])) for pair in shown]}


def night(reader: Reader, parts: list[str], _: dict[str, str]) -> dict[str, Any]:
    """A nightly job: its iterations in order with what became of each, the watch's reverts, spend."""
    record = reader.night(parts[0])
    if record is None:
        raise NotFound(f"no night {parts[0]!r}")
    state = json.loads(record.get("state_json") or "{}")
    return {"template": "night", "title": f"Night {record['nightly_id']}", "night": record, "state": state,
            "iterations": state.get("iterations") or []}


def search(reader: Reader, _: list[str], query: dict[str, str]) -> dict[str, Any]:
    """Trials whose transcript or outcome holds the text `q`."""
    text = query.get("q", "").strip()
    if len(text) > 200:
        raise BadRequest("search for at most 200 characters")
    page = _page_number(query)
    found, more = _split(reader.search(text, page)) if text else ([], False)
    return {"template": "search", "title": f"Search: {text}" if text else "Search transcripts", "q": text,
            "found": found, "page": page, "more": more}


def changed(reader: Reader, parts: list[str], query: dict[str, str]) -> dict[str, Any]:
    """`/iterations/<id>/changed`, the address `optimizer review --format markdown` links to:
    the changed pairs of the iteration's accepted proposal (else its first)."""
    if parts[1] != "changed":
        raise NotFound(f"no page {parts[1]!r} of an iteration")
    return pairs(reader, parts[:1], query)


def trend(reader: Reader, _: list[str], __: dict[str, str]) -> dict[str, Any]:
    return {"template": "trends", "title": "Pass rate over time", "trends": trends(reader.engine)}


ROUTES: dict[str, tuple[int, Callable[[Reader, list[str], dict[str, str]], dict[str, Any]]]] = {
    "": (0, home), "run": (1, run), "trial": (1, trial), "iteration": (1, iteration), "pairs": (1, pairs),
    "iterations": (2, changed), "trends": (0, trend), "night": (1, night), "search": (0, search)}
"""First path segment -> (number of segments after it, page)."""


def render(env: jinja2.Environment, reader: Reader, path: str, query: dict[str, str]) -> tuple[int, str]:
    """(HTTP status, HTML) of the page at `path`."""
    parts = [part for part in path.split("/") if part]
    head, rest = (parts[0], parts[1:]) if parts else ("", [])
    route = ROUTES.get(head)
    try:
        if route is None or len(rest) != route[0]:
            raise NotFound(f"no page {path!r}")
        data = route[1](reader, rest, query)
        return 200, env.get_template(f"viewer/{data['template']}.html.j2").render(**data)
    except NotFound as exc:
        return 404, env.get_template("viewer/error.html.j2").render(title="Not found", message=str(exc))
    except BadRequest as exc:
        return 400, env.get_template("viewer/error.html.j2").render(title="Bad request", message=str(exc))
    except Exception as exc:  # a page that fails is one page's 500, not a dropped connection
        return 500, env.get_template("viewer/error.html.j2").render(title="Server error",
                                                                     message=f"{type(exc).__name__}: {exc}")
