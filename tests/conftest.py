"""Every test runs isolated: its own state dir (store, cache), no API keys, fast retries. Store
tests also run against a PostgreSQL server started here (`postgres_server`)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import project_repo

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Ctrl-C works in the tests and in every process they start, also when the suite was started
    with SIGINT ignored (`make test &` from a non-interactive shell: an ignored signal is
    inherited, and Python then keeps it ignored). A handler, unlike SIG_IGN, is reset to the
    default in a child process."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # pytest-xdist's workers ignore SIGHUP, and so would every command a test starts (the CLI
    # keeps an ignored SIGHUP ignored, as under nohup): the tests of a hang-up need the default.
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("OPTIMIZER_STATE_DIR", str(state))
    monkeypatch.setenv("OPTIMIZER_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(PROJECT_ROOT))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPTIMIZER_TRIALS", "OPTIMIZER_SUITES"):
        monkeypatch.delenv(key, raising=False)
    for role in ("AGENT", "JUDGE", "PATCHER"):  # the default, the embedded model, is for `make test-local`
        monkeypatch.setenv(f"OPTIMIZER_{role}_MODEL", "mock/sim")
    # the loop tests' scripted proposals are written for the targets a baseline of `loop_trials` per
    # task picks; the extra trials of a task alone in its bucket are tested where they are asked for
    monkeypatch.setenv("OPTIMIZER_LONE_TASK_FACTOR", "1")
    return state


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the `optimizer` command in-process; returns (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        from optimizer.cli import main

        monkeypatch.setattr(sys, "argv", ["optimizer", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A throw-away project repository (`project_repo`) with an uncommitted edit and an untracked
    file, as OPTIMIZER_ROOT, proposals from the scripted mock/patcher."""
    root = project_repo(tmp_path / "repo", {"notes.txt": "committed\n"})
    (root / "notes.txt").write_text("committed\nplus an uncommitted edit\n")
    (root / "scratch.txt").write_text("untracked\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    monkeypatch.setenv("OPTIMIZER_PATCHER_MODEL", "mock/patcher")
    return root


# ------------------------------------------------------------------ PostgreSQL
# The store tests run on SQLite and on a real PostgreSQL server that the suite starts itself:
# initdb into a temporary folder, the server listening on a unix socket there only (no TCP), a
# fresh database per test, everything stopped and deleted at the end. Without the server
# programs the PostgreSQL tests are skipped, except in CI (CI=true), where they fail: a CI that
# skips them silently would pass without ever having tried the team's store.

POSTGRES_PROGRAMS = ("initdb", "pg_ctl", "postgres")


def postgres_bin_dir() -> Path | None:
    """The folder of `initdb`, `pg_ctl` and `postgres`: on the PATH, else Debian's newest
    /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda path: int(path.parent.name)
                         if path.parent.name.isdigit() else 0, reverse=True)
    return next((folder for folder in candidates if all((folder / name).exists() for name in POSTGRES_PROGRAMS)),
                None)


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Who runs the server when the tests run as root (postgres refuses to): Debian's `postgres`
    user, else `nobody`; None when not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.fail("the tests run as root and there is no `postgres` or `nobody` user to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PostgresServer:
    """A running throw-away server; `new_database()` gives each test a blank database."""

    folder: Path
    port: int
    _databases: int = 0

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.folder}&port={self.port}"

    def new_database(self) -> str:
        import psycopg

        self._databases += 1
        name = f"test_{self._databases}"
        with psycopg.connect(host=str(self.folder), port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server for the whole session, started on first use."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        missing = "the PostgreSQL server programs (initdb, pg_ctl, postgres) are not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}, and CI must run the PostgreSQL tests (apt-get install postgresql)")
        pytest.skip(f"{missing} (apt-get install postgresql)")
    user = _unprivileged_user()
    as_user = ["runuser", "-u", user.pw_name, "--"] if user else []
    folder = Path(tempfile.mkdtemp(prefix="optimizer-pg-"))  # short: a socket path has ~100 bytes
    if user:
        os.chown(folder, user.pw_uid, user.pw_gid)
    data, log = folder / "data", folder / "server.log"

    def run(*command: str) -> None:
        done = subprocess.run([*as_user, str(bin_dir / command[0]), *command[1:]], capture_output=True, text=True,
                              cwd=folder, timeout=120)
        if done.returncode != 0:
            server_log = log.read_text() if log.exists() else ""
            pytest.fail(f"{command[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}{server_log}")

    server = PostgresServer(folder=folder, port=_free_port())
    try:
        run("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = ''\nport = {server.port}\nunix_socket_directories = '{folder}'\n"
                       "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
        run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", "start")
        yield server
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL of a blank database on the session's PostgreSQL server."""
    return postgres_server.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """A blank store's URL, once per database the store supports: SQLite in the test's folder
    (`tmp_path / "optimizer.db"`) and a database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'optimizer.db'}"
    return request.getfixturevalue("postgres_url")
