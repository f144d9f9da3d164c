"""The proposer's box: a clone of its own, and bubblewrap around a proposer command.

A git worktree shares `.git` (config, hooks, refs) with the user's repository, so a proposer
working in one can set `core.hooksPath`, move a branch or plant a tag there. The box is instead a
fresh repository (`git init`, then a shallow fetch of the base commit from the user's
repository, before the proposer starts): its config, hooks and refs are its own and are never
read by the loop. The patch is the box's final work tree against the base commit, staged with the
*user's* git directory and a throw-away index (`gitops.final_change`), so nothing the proposer
wrote into the box's `.git` runs or counts.

Both proposers work in the box: `llm` writes the prompt file in process, `command` runs in it.
When `bwrap` works on this machine the command runs under it: the whole filesystem read-only,
its own `/dev`, `/proc` and pid namespace, a private `/tmp` (the folders of the host's /tmp
that the command line names bound read-only), and only the box's clone and a scratch HOME
writable; the network is left as is (coding agents call their API). Without `bwrap` the
command runs unconfined, `optimizer.nightly.reaper` ends every process it leaves, and `checkout_state`
is what notices what it changed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from optimizer.errors import HarnessError, first_line
from optimizer.gitops import AUTHOR_EMAIL, AUTHOR_NAME
from optimizer.store.ownership import start_stamp

INSTALL = "install bubblewrap (sudo apt-get install bubblewrap)"

PASSED = ("PATH", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR",
          "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
          "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
          "*_API_KEY", "*_API_BASE", "*_BASE_URL", "*_API_VERSION", "OPENAI_*", "ANTHROPIC_*", "AZURE_*",
          "GEMINI_*", "OPENROUTER_*", "AIDER_*")
"""What a proposer command's environment keeps of the harness's (shell patterns): the system's
basics, the proxies and certificates, and a coding agent's provider keys and addresses. The rest
is left out unless `proposer_env` names it."""
NEVER_PASSED = ("OPTIMIZER_*", "DATABASE_URL", "*_DATABASE_URL", "PG*", "LITELLM_MASTER_KEY", "GIT_*",
                "SSH_AUTH_SOCK", "DBUS_*", "XDG_RUNTIME_DIR")
"""Never passed, even when `proposer_env` names it: the harness's own settings (the store's URL
and its password among them), the database client's variables, git's (they would point its git
at the user's repository) and the user's agents and sessions."""
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def never_passed(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in NEVER_PASSED)


def proposer_environment(home: Path | None, extra: tuple[str, ...] | list[str] = (),
                         source: dict[str, str] | None = None) -> dict[str, str]:
    """A proposer command's environment: of `source` (the harness's), the variables `PASSED` or
    `extra` name, less `NEVER_PASSED` and any whose value holds the store's address; HOME is the
    box's scratch home when there is one."""
    source = dict(os.environ if source is None else source)
    secret = source.get("OPTIMIZER_DATABASE_URL") or ""
    kept = {name: value for name, value in source.items()
            if (name in extra or any(fnmatch.fnmatchcase(name, pattern) for pattern in PASSED))
            and not never_passed(name) and not (secret and secret in value)}
    if home is not None:
        kept["HOME"] = str(home)
    elif "HOME" in source:
        kept["HOME"] = source["HOME"]
    return kept


@dataclass(frozen=True)
class Box:
    folder: Path
    """All a confined proposer command may write to: the clone and its HOME."""

    @property
    def workdir(self) -> Path:
        """The clone: the base commit checked out on the proposal's branch name."""
        return self.folder / "repo"

    @property
    def home(self) -> Path:
        """A scratch HOME for the proposer command (empty at the start)."""
        return self.folder / "home"


@contextmanager
def open_box(repo, *, branch: str, base_commit: str, parent: Path) -> Iterator[Box]:
    """A fresh clone of `base_commit` under `parent`, removed afterwards whatever happened."""
    folder = (parent / branch.replace("/", "__")).resolve()
    shutil.rmtree(folder, ignore_errors=True)
    box = Box(folder)
    box.home.mkdir(parents=True)
    source = str(Path(repo.common_dir).resolve())
    try:
        for args in (["init", "-q", str(box.workdir)],
                     ["-C", str(box.workdir), "fetch", "-q", "--depth=1", "--no-tags", source, base_commit],
                     ["-C", str(box.workdir), "checkout", "-q", "-B", branch, "FETCH_HEAD"],
                     ["-C", str(box.workdir), "config", "user.name", AUTHOR_NAME],
                     ["-C", str(box.workdir), "config", "user.email", AUTHOR_EMAIL]):
            done = subprocess.run(["git", *args], capture_output=True, text=True)
            if done.returncode != 0:
                raise HarnessError(f"could not make the proposer's clone: `git {' '.join(args)}` said "
                                   f"{first_line(done.stderr, 'nothing')!r}",
                                   fix=f"check that {parent} is writable and that `git fetch` from {source} works")
        yield box
    finally:
        shutil.rmtree(folder, ignore_errors=True)


BOX_MARK = "PROMPT_OPTIMIZER_BOX"
"""Set in a proposer command's environment to its box's folder: what finds the processes a
killed optimizer left running there (`stop_left_proposers`)."""
OWNER_FILE = "proposer.json"


def record_owner(box: Box, pid: int) -> None:
    """Note in the box which optimizer process (pid and start time) runs its proposer `pid`."""
    (box.folder / OWNER_FILE).write_text(json.dumps({"proposer": pid, "owner": os.getpid(),
                                                     "owner_start": start_stamp(os.getpid())}), encoding="utf-8")


def _owner_alive(folder: Path) -> bool:
    try:
        owner = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return start_stamp(int(owner.get("owner", 0) or 0)) == owner.get("owner_start") is not None


def stop_left_proposers(parent: Path) -> list[int]:
    """Kill the processes a proposer command left running in a box under `parent` whose
    optimizer is gone (a `kill -9`, the OOM killer, a hard CI cancel: its own cleanup never ran):
    every process whose environment marks it as that box's (`BOX_MARK`), whatever session or
    parent it has now; then remove those boxes. A box whose optimizer still runs is left alone.
    Returns the pids killed."""
    dead = [folder.resolve() for folder in sorted(parent.iterdir()) if folder.is_dir()
            and (folder / OWNER_FILE).exists() and not _owner_alive(folder)] if parent.is_dir() else []
    if not dead:
        return []
    killed = stop_marked(dead)
    for folder in dead:
        shutil.rmtree(folder, ignore_errors=True)
    return killed


def stop_marked(folders: list[Path]) -> list[int]:
    """SIGKILL every process whose environment marks it as one of the boxes `folders`
    (`BOX_MARK`), whatever its session or parent; returns their pids. Beside `Reaper`, this also
    ends what a proposer command left running where this process cannot be a subreaper."""
    marks = {f"{BOX_MARK}={folder}".encode() for folder in folders}
    killed = []
    for _ in range(20):  # a process that forks while being killed is found again
        found = [pid for pid in _marked(marks) if pid != os.getpid()]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
        time.sleep(0.05)
    return sorted(set(killed))


def _marked(marks: set[bytes]) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if environ & marks:
            out.append(int(entry.name))
    return out


def remove_stray_boxes(parent: Path) -> list[str]:
    """Remove the boxes a killed process left under `parent` (the processes it left running in
    them first, `stop_left_proposers`); returns their names."""
    stop_left_proposers(parent)
    removed = sorted(path.name for path in parent.iterdir()) if parent.is_dir() else []
    for name in removed:
        shutil.rmtree(parent / name, ignore_errors=True)
    return removed


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


@dataclass(frozen=True)
class Confinement:
    bwrap: str | None
    """The `bwrap` to run a proposer command under, or None: it runs unconfined."""
    note: str = ""
    """Why there is no bwrap, for one log line per run."""


def confinement() -> Confinement:
    """bwrap when it is installed and can make a sandbox here (a container may forbid the
    namespaces it needs); else None and the reason."""
    bwrap = find_bwrap()
    if bwrap is None:
        return Confinement(None, f"bubblewrap (bwrap) is not installed: the proposer command runs unconfined, "
                                 f"and only the check of the checkout after it stops what it changed there; {INSTALL}")
    try:
        probe = subprocess.run(confined([bwrap], ["true"], writable=[], readable=[], workdir=Path("/")),
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Confinement(None, f"bubblewrap ({bwrap}) could not start ({exc}): the proposer command runs unconfined")
    if probe.returncode != 0:
        return Confinement(None, f"bubblewrap ({bwrap}) cannot make a sandbox here "
                                 f"({first_line(probe.stderr, f'exit code {probe.returncode}')}): the proposer "
                                 f"command runs unconfined; allow unprivileged user namespaces to confine it")
    return Confinement(bwrap)


def under_private_tmp(command: str) -> list[Path]:
    """The folders of the host's /tmp that a proposer command line names: its program (as given
    or found on the PATH) and every absolute path among its words (`--flag=/tmp/...` included).
    bwrap's private /tmp would hide them and the command would fail with 127 (a checkout or a
    venv under /tmp), so they are bound read-only. Each is the top folder under /tmp that holds
    the path, since a file there needs its siblings (a venv's python its `pyvenv.cfg` and
    packages, a checkout's script its package). A word's trailing shell punctuation (`/tmp/x;`)
    is not part of its path. A path the command only computes is not seen."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: bash will say so
        words = command.split()
    program = shutil.which(words[0]) if words else None
    candidates = [word.split("=", 1)[-1].rstrip(";&|)") for word in words] + ([program] if program else [])
    found = set()
    for candidate in candidates:
        for path in {Path(candidate), Path(candidate).resolve()} if candidate.startswith("/") else ():
            top = Path(*path.parts[:3])
            if len(path.parts) >= 3 and path.parts[1] == "tmp" and top.exists():
                found.add(top)
    return sorted(found)


SOCKET_FOLDERS = ("/run/postgresql", "/var/run/postgresql", "/run/mysqld", "/var/run/mysqld")
"""Where database servers keep their Unix sockets: hidden in the box (an empty folder over each)."""


def confined(bwrap: list[str], argv: list[str], *, writable: list[Path], readable: list[Path],
             workdir: Path) -> list[str]:
    """`argv` under bwrap: `/` read-only, fresh `/dev`, `/proc` and `/tmp`, the database servers'
    socket folders empty (`SOCKET_FOLDERS`), then `readable` and `writable` bound at their own
    paths, in that order (after the private `/tmp`, so a box under /tmp is there, writable even
    inside a folder bound read-only)."""
    command = [*bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
               "--unshare-pid", "--die-with-parent"]
    for folder in sorted({Path(folder).resolve() for folder in SOCKET_FOLDERS if Path(folder).is_dir()}):
        command += ["--tmpfs", str(folder)]
    for path in readable:
        command += ["--ro-bind", str(path), str(path)]
    for path in writable:
        command += ["--bind", str(path), str(path)]
    return [*command, "--chdir", str(workdir), "--", *argv]
