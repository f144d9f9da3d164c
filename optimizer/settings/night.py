"""A night's settings and owner: stored when it starts, read back by `--resume`.

A night is one experiment, so every iteration of it runs with what it started with: the nightly
flags and every `Settings` field, however each was set (settings file, `OPTIMIZER_*`, a flag).
They are stored flat, in JSON form, each under the name of its flag or setting (`trials`,
`agent_model`, `time_limit`, `suite`...), in the nightlies row's `settings`, beside the
repository and checkout the night belongs to (`OWNER`). `--resume` takes the newest unfinished
night of this repository (`resumable`: a shared PostgreSQL store holds other repositories' nights
too) and restores them: this invocation's settings file and environment do not change the night,
and a flag given again must agree with the stored value unless `--override` names it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from git import GitCommandError
from pydantic import ValidationError

from optimizer.settings.config import Settings
from optimizer.settings.parts import SettingsParts
from optimizer.errors import ConfigError, InputError

LIMITS = ("max_iterations", "time_limit", "budget_usd", "budget_tokens", "patience", "order")
NIGHT = ("suite", "merge", "base", "date", *LIMITS)
"""The night's own flags; the rest of what it stores are `Settings` fields."""
FIXED = ("base", "date")
"""A resumed night keeps its base and its branch: no override."""
MACHINE = frozenset({"state_dir", "database_url", "workspace_dir", "concurrency", "local_slots",
                     "local_threads"})
"""Where this machine keeps the store and workspaces, and how much it runs at once: no trial's
outcome depends on them, so a resumed night takes them from the invocation that resumes it."""
OWNER = ("repository", "checkout", "host")
"""Stored beside the settings: whose night it is (`optimizer.nightly.lock.repository_identity`, the
project folder, the machine)."""
STORED = "the night's stored settings"
UNFINISHED = ("running", "crashed")
"""The statuses of a night that can be resumed: killed while it ran, or stopped by an error."""


def night_values(settings: Mapping[str, Any], night: dict[str, Any]) -> dict[str, Any]:
    """Everything a night runs with, flat and in JSON form: every setting (`SettingsParts.values`)
    and the night's flags."""
    return json.loads(json.dumps({**settings, **night}))


def stored_values(record: dict[str, Any]) -> dict[str, Any]:
    """A nightlies row's stored values, without its owner (read from the older layout too, which
    kept the limits apart and the suites and merge flag in the state)."""
    values = {name: value for name, value in (record.get("settings") or {}).items() if name not in OWNER}
    old = values.pop("limits", None)
    if old is not None:
        state = record.get("state") or {}
        values.update({name: old.get(name) for name in LIMITS if name in old},
                      time_limit=old.get("time_limit_s"), suite=state.get("suites"), merge=state.get("merge", False))
    return values


def override_names(raw: Collection[str]) -> set[str]:
    """`--override` names as stored (`time-limit`, `--time-limit` -> `time_limit`); an unknown
    name, or one a resumed night cannot change, is refused."""
    names = {text.strip().lstrip("-").replace("-", "_") for text in raw}
    known = set(NIGHT) | set(Settings.model_fields)
    for name in sorted(names):
        if name in FIXED:
            raise InputError(f"a resumed night keeps its {name}", field="--override",
                             fix=f"start a new night (without --resume) for another --{name}")
        if name not in known:
            raise InputError(f"{name!r} is neither a nightly flag nor a setting", field="--override",
                             fix=f"name one of: {', '.join(sorted(known - set(FIXED)))}")
    return names


def restore(stored: dict[str, Any], requested: dict[str, Any], *, given: Collection[str],
            overrides: Collection[str], log: Callable[[str], None]) -> dict[str, Any]:
    """The values a resumed night runs with: the stored ones, except those of `MACHINE`, those
    named in `overrides` and those the night did not store yet, which come from this invocation
    (`requested`). A flag given on the command line (`given`) that disagrees with its stored
    value is refused; a setting of this invocation's file or environment that does, is noted."""
    values = dict(stored)
    for name, value in requested.items():
        if name in MACHINE or name in overrides or name not in stored:
            values[name] = value
        elif value != stored[name] and name in given:
            raise _disagreement(name, value, stored[name])
        elif value != stored[name] and name not in NIGHT and value is not None:  # None: this invocation set nothing
            log(f"resume: keeping the night's {name} = {stored[name]!r} (this invocation's settings say "
                f"{value!r}; --override {name} takes theirs)")
    return values


def _disagreement(name: str, value: Any, stored: Any) -> InputError:
    flag = "--" + name.replace("_", "-")
    fix = (f"start a new night (without --resume) for another {flag}" if name in FIXED else
           f"drop {flag} to keep the night's value, or add --override {name.replace('_', '-')} to run the rest "
           "of the night with yours")
    return InputError(f"{flag} {_shown(value)} disagrees with the night being resumed, which runs with "
                      f"{_shown(stored)}", field=flag, fix=fix)


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def settings_of(values: dict[str, Any]) -> Settings:
    """The `Settings` among a night's values; one no longer valid names itself."""
    try:
        return Settings.model_validate({name: values[name] for name in Settings.model_fields if name in values})
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][0])
        raise ConfigError(exc.errors()[0]["msg"], path=STORED, field=name,
                          fix=f"resume with --override {name} and a valid value for it") from None


def parts_of(values: dict[str, Any], root) -> SettingsParts:
    """The parts of the settings among a night's stored values, checked and put in use as
    loaded ones are (`optimizer.settings.loading.put_in_use`)."""
    from optimizer.settings.loading import put_in_use

    return put_in_use(settings_of(values), root).parts


def owned(values: dict[str, Any], identity: str, root) -> dict[str, Any]:
    """What a night stores: its values (no store password: `database_url` is this machine's and
    is never restored) and its owner (this repository, checkout and machine)."""
    from optimizer.store.address import without_password

    host, checkout = _here(root)
    return {**values, "database_url": without_password(values.get("database_url")), "repository": identity,
            "checkout": checkout, "host": host}


def resumable(rows: list[dict[str, Any]], repo, identity: str, root: Path) -> dict[str, Any]:
    """The newest unfinished night of this repository, one started in this checkout first: a
    shared store holds the nights of other repositories and checkouts too. Its commits must be here."""
    unfinished = [row for row in rows if row["status"] in UNFINISHED]
    ours = [row for row in unfinished if _of_repository(row, identity, repo)]
    if not ours:
        others = f" ({len(unfinished)} of other repositories in this store are not)" if unfinished else ""
        mine = [row for row in rows if _of_repository(row, identity, repo)]
        last = ""
        if mine:  # the newest night of this repository, and where it last ran (a resume moves it)
            host, folder = _where(mine[-1])
            last = (f"; its newest, {mine[-1]['nightly_id']} on {mine[-1]['branch']}, is {mine[-1]['status']}, "
                    f"last run in {folder} on {host}")
        raise InputError(f"there is no unfinished nightly job of this repository to resume{others}{last}",
                         field="--resume", fix="start a new night without --resume")
    record = ([row for row in ours if _where(row) == _here(root)] or ours)[-1]
    missing = next((sha for sha in (record["base_commit"], record["tip_commit"]) if not _has_commit(repo, sha)), None)
    if missing:
        host, folder = _where(record)
        raise InputError(f"nightly {record['nightly_id']} was started in {folder} on {host}, and its commit "
                         f"{missing[:12]} is not in this repository", field="--resume",
                         fix=f"resume it there, or fetch its branch {record['branch']} here first")
    return record


def left_here(rows: list[dict[str, Any]], repo, identity: str, root: Path) -> list[dict[str, Any]]:
    """The unfinished nights of this repository started in this checkout on this machine: a new
    night, started under the repository's lock, replaces them (none of them can be running)."""
    return [row for row in rows if row["status"] in UNFINISHED and _where(row) == _here(root)
            and _of_repository(row, identity, repo)]


def _of_repository(record: dict[str, Any], identity: str, repo) -> bool:
    """A night stored with its repository's identity must have this one; an older record, its base commit here."""
    stored = (record.get("settings") or {}).get("repository")
    return stored == identity if stored else _has_commit(repo, record["base_commit"])


def _here(root) -> tuple[str, str]:
    """This machine and checkout, as `_where` reads them from a night's record."""
    return socket.gethostname(), str(Path(root).resolve())


def _where(record: dict[str, Any]) -> tuple[str, str]:
    settings = record.get("settings") or {}
    return settings.get("host", "?"), settings.get("checkout", "?")


def _has_commit(repo, sha: str) -> bool:
    try:
        repo.git.cat_file("-e", f"{sha}^{{commit}}")
    except GitCommandError:
        return False
    return True
