"""Where a project's store is: a database URL, as the settings name it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def default_url(state_dir: Path) -> str:
    return f"sqlite:///{state_dir / 'optimizer.db'}"


def store_url(settings, project_root: Path) -> tuple[str, str]:
    """The store's URL and the setting that chose it: `database_url` when set, else SQLite in
    the state folder (`state_dir`)."""
    return url_of(settings.database_url, settings.state_dir, project_root)


def url_of(database_url: str | None, state_dir: str, project_root: Path) -> tuple[str, str]:
    """`store_url` from the two settings' values (read with or without the settings model)."""
    if database_url:
        return database_url, "database_url"
    return default_url(project_root / state_dir), "state_dir"


def without_password(url: str | None) -> str | None:
    """`url` with any password in it shown as `***`: the one after the user name and a `password`
    query parameter (libpq's form). What is recorded or printed of a store's address: a record in a
    shared store is read by every role that can read the store."""
    if not url or "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            netloc = f"{user.split(':', 1)[0]}:***@{host}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    hidden = any(key.lower() in ("password", "passwd") for key, _ in pairs)
    if netloc == parts.netloc and not hidden:
        return url  # nothing to hide: the URL as written
    query = urlencode([(key, "***" if key.lower() in ("password", "passwd") else value) for key, value in pairs],
                      safe="/*") if hidden else parts.query
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store's URL; None for another database or an in-memory one."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


def connect_read_only(path: Path, **options) -> sqlite3.Connection:
    """A connection to the SQLite file at `path` opened with `mode=ro`: SQLite refuses every
    write through it. `options` go to `sqlite3.connect`."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, **options)
