"""Where a project's store is: a database URL, as the settings name it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


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


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite store's URL; None for another database or an in-memory one."""
    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    return Path(path) if path and path != ":memory:" else None


def connect_read_only(path: Path, **options) -> sqlite3.Connection:
    """A connection to the SQLite file at `path` opened with `mode=ro`: SQLite refuses every
    write through it. `options` go to `sqlite3.connect`."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, **options)
