"""What of the user's checkout a proposer must leave alone, taken before and after it runs.

The proposer works in a box of its own (`optimizer.proposal.box`), under bubblewrap when it can; without
bubblewrap, or through a hole in it, it could still write to the user's repository by absolute
path. So the loop compares this state before and after every proposer, and stops the iteration on
any difference (`CheckoutChanged`), before any git command of ours runs with the user's config.
"After" is once the proposer and every process it left are gone (`optimizer.nightly.reaper`), so nothing
it started writes after the check.

Cheap by design: one `git ls-files` (tracked and untracked, not ignored) and one
`git for-each-ref`, file hashes, and the few files of `.git` that decide what git runs. Files git
ignores, and anything outside the repository, are not covered: that is bubblewrap's part.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from optimizer.errors import HarnessError

SAFE_GIT = ["git", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false"]
"""No command of the user's config runs while the state is read (a changed config is reported, not obeyed)."""
SHOWN = 12
"""Changes named in the message; the rest are counted."""


class CheckoutChanged(HarnessError):
    """A proposer changed the user's checkout (files, index, HEAD, config, hooks or refs): the
    iteration is stopped before anything is evaluated (exit code 3, like any harness stop, never
    the verdict code 1)."""


@dataclass(frozen=True)
class CheckoutState:
    head: str
    """`.git/HEAD` as written, and the commit it resolves to."""
    index: str
    files: dict[str, str]
    """Every tracked and untracked (not ignored) path -> a hash of what is there now."""
    config: str
    config_entries: tuple[str, ...] | None
    """`key=value` lines of `.git/config` (None when git cannot parse it), to name what changed."""
    git_files: dict[str, str]
    """`.git/hooks/*` and `.git/info/*` -> their hash (a hook, or an exclude that hides a file)."""
    refs: dict[str, str]


def checkout_state(repo) -> CheckoutState:
    root = Path(repo.working_tree_dir)
    git_dir, common = Path(repo.git_dir), Path(repo.common_dir)
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    files = {path: _hash(root / path) for path in sorted(set(listed.split("\0"))) if path}
    refs = dict(line.split("\0", 1) for line in _git(root, "for-each-ref", "--format=%(refname)%00%(objectname)")
                .splitlines() if line)
    head = _read(git_dir / "HEAD") + " " + _git(root, "rev-parse", "--verify", "-q", "HEAD", check=False).strip()
    git_files = {f"{folder}/{path.name}": _hash(path) for folder in ("hooks", "info")
                 for path in sorted((common / folder).glob("*"))}
    return CheckoutState(head=head, index=_hash(git_dir / "index"), files=files, config=_hash(common / "config"),
                         config_entries=_config_entries(common / "config"), git_files=git_files, refs=refs)


def changes(before: CheckoutState, after: CheckoutState) -> list[str]:
    """What differs, one short name each, most telling first: config, hooks, refs, HEAD, index, files."""
    found = []
    if before.config != after.config:
        keys = _changed_keys(before.config_entries, after.config_entries)
        found.append(f".git/config ({', '.join(keys)})" if keys else ".git/config")
    found += [f".git/{name}" for name in _changed(before.git_files, after.git_files)]
    found += _changed(before.refs, after.refs)
    if before.head != after.head:
        found.append("HEAD")
    if before.index != after.index:
        found.append(".git/index")
    found += _changed(before.files, after.files)
    return found


def stop_message(found: list[str]) -> str:
    shown = ", ".join(found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    return f"the proposer changed the user's checkout: {shown}; the iteration is stopped and nothing was evaluated"


def _changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


def _changed_keys(before: tuple[str, ...] | None, after: tuple[str, ...] | None) -> list[str]:
    if before is None or after is None:
        return []
    differ = (Counter(before) - Counter(after)) + (Counter(after) - Counter(before))
    return sorted({entry.split("=", 1)[0] for entry in differ})


def _config_entries(path: Path) -> tuple[str, ...] | None:
    if not path.is_file():
        return ()
    done = subprocess.run(["git", "config", "--file", str(path), "--list", "-z"], capture_output=True)
    if done.returncode != 0:
        return None
    return tuple(sorted(entry.decode("utf-8", "replace").replace("\n", "=", 1)
                        for entry in done.stdout.split(b"\0") if entry))


def _hash(path: Path) -> str:
    """What is at `path` now, without following a link: a content hash, a link's target, or its kind."""
    try:
        if path.is_symlink():
            return "link:" + os.readlink(path)
        if not path.is_file():
            return "folder" if path.is_dir() else "missing"
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "missing"


def _git(root: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run([*SAFE_GIT, *args], cwd=root, capture_output=True)
    if check and done.returncode != 0:
        raise HarnessError(f"could not read the state of the checkout at {root}: `git {' '.join(args)}` said "
                           f"{done.stderr.decode('utf-8', 'replace').strip()[:300]!r}",
                           fix="check that the repository is readable and not mid-operation (`git status`)")
    return done.stdout.decode("utf-8", errors="replace")
