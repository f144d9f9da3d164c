"""A proposer cannot rewrite what a night's later decisions rest on: erasing earlier decisions
(each later decision's level is counted from them) stops the night while the proposer's work is
checked, and settings rewritten by a proposer that then hung and was killed with the night are
refused by `--resume`. Both on SQLite (an unconfined proposer writes the file) and on a team's
PostgreSQL under bubblewrap (the box leaves the network open; the proposer knows where the
server is). The proposer's environment carries no `OPTIMIZER_*` variable and no database URL."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimizer.proposal.box import confinement
from tests.end_to_end.test_nightly import nightly
from tests.end_to_end.test_nightly_resume import OPTIMIZER
from tests.helpers import optimizer_branches
from tests.optimizer.store.test_store_digest import sql_command
from tests.optimizer.proposal.test_proposer_isolation import APPEND_RULE, propose_with

ERASE_DECISIONS = "delete from proposals"
TAMPERED = {"alpha": 0.49, "night_alpha": 0.99, "alpha_harm": 0.001, "max_changed_lines": 10000}
needs_bwrap = pytest.mark.skipif(confinement().bwrap is None,
                                 reason="bubblewrap is not installed or cannot make a sandbox here")


def pg_command(server, url: str, code: str) -> str:
    """Shell text that runs Python `code` with `conn`, a psycopg connection to the test's database,
    named the way a hostile proposer would (the socket folder on its command line, so bubblewrap's
    private /tmp binds it, as it binds any /tmp path a command line names)."""
    database = url.split("@/")[1].split("?")[0]
    program = (f"import psycopg, json, sys\nconn = psycopg.connect(host=sys.argv[1], port={server.port}, "
               f"user='postgres', dbname={database!r}, autocommit=True)\n{code}")
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(program)} {shlex.quote(str(server.folder))}"


def tamper_settings_code(sql_connection: str) -> str:
    return (f"{sql_connection}\nrow = conn.execute('select nightly_id, settings_json from nightlies').fetchone()\n"
            f"settings = json.loads(row[1]); settings.update({TAMPERED!r})\n"
            "conn.execute('update nightlies set settings_json = %s where nightly_id = %s', "
            "(json.dumps(settings), row[0]))")


def test_an_unconfined_proposer_erasing_the_nights_decisions_stops_it(cli, repo, isolated, tmp_path, monkeypatch):
    monkeypatch.setattr("optimizer.proposal.box.find_bwrap", lambda: None)
    propose_with(monkeypatch, f"{APPEND_RULE} && {sql_command(isolated / 'optimizer.db', ERASE_DECISIONS)}")
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "3")
    assert code == 3, output
    assert "the store changed while the proposer ran: nightly " in output
    assert "'s recorded proposals and decisions are not what they were" in output
    assert "confine the proposer with bubblewrap" in output
    assert [branch for branch in optimizer_branches(repo) if "/card_agent-" in branch] == []


@needs_bwrap
def test_a_confined_proposer_erasing_decisions_in_the_team_store_stops_the_night(cli, repo, tmp_path, monkeypatch,
                                                                                postgres_server, postgres_url):
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", postgres_url)
    erase = pg_command(postgres_server, postgres_url, f"conn.execute({ERASE_DECISIONS!r})")
    propose_with(monkeypatch, f"{APPEND_RULE} && {erase}")
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "3")
    assert code == 3, output
    assert "'s recorded proposals and decisions are not what they were" in output
    assert "confine the proposer" not in output, "it ran confined"
    import psycopg
    with psycopg.connect(host=str(postgres_server.folder), port=postgres_server.port, user="postgres",
                         dbname=postgres_url.split("@/")[1].split("?")[0]) as conn:
        status = conn.execute("select status, summary_json from iterations order by started_at").fetchall()
    assert status[-1][0] == "stopped" and "recorded proposals and decisions" in json.loads(status[-1][1])["stop_reason"]


def _night_env(repo: Path, state: Path, url: str, command: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(OPTIMIZER_ROOT=str(repo), OPTIMIZER_STATE_DIR=str(state), OPTIMIZER_DATABASE_URL=url,
               OPTIMIZER_RETRY_BASE_DELAY="0.01", OPTIMIZER_LONE_TASK_FACTOR="1", OPTIMIZER_AGENT_MODEL="mock/sim",
               OPTIMIZER_JUDGE_MODEL="mock/sim", OPTIMIZER_PATCHER_MODEL="mock/sim", OPTIMIZER_PROPOSER="command",
               OPTIMIZER_PROPOSER_COMMAND=f"test -f {{request}} && {{ {command}; }}", OPTIMIZER_PLAIN="1")
    return env


@needs_bwrap
def test_settings_a_killed_proposer_rewrote_in_the_team_store_are_refused_on_resume(repo, tmp_path, postgres_server,
                                                                                   postgres_url):
    """The proposer rewrites the running night's stored settings and hangs; the night is killed
    (kill -9) while it waits; `--resume` finds the record differs from the night's witness."""
    import psycopg

    state = tmp_path / "state"
    flag = tmp_path / "tampered"
    tamper = pg_command(postgres_server, postgres_url, tamper_settings_code(""))
    env = _night_env(repo, state, postgres_url, f"{APPEND_RULE} && {tamper} && sleep 600")
    night = subprocess.Popen([OPTIMIZER, "nightly", "--plain", "--max-iterations", "2", "--date", "2026-11-25"],
                             cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    database = postgres_url.split("@/")[1].split("?")[0]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and night.poll() is None:
            try:
                with psycopg.connect(host=str(postgres_server.folder), port=postgres_server.port, user="postgres",
                                     dbname=database) as conn:
                    row = conn.execute("select settings_json from nightlies").fetchone()
            except psycopg.Error:
                row = None
            if row and json.loads(row[0]).get("alpha") == TAMPERED["alpha"]:
                flag.touch()
                break
            time.sleep(0.5)
    finally:
        night.send_signal(signal.SIGKILL)
        night.wait(timeout=60)
    assert flag.exists(), "the proposer never rewrote the settings"

    resumed = subprocess.run([OPTIMIZER, "nightly", "--resume", "--plain"], cwd=repo,
                             env=_night_env(repo, state, postgres_url, "true"), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    message = resumed.stdout + resumed.stderr
    assert "stored record (settings and state)" in message and "changed in the store after its process" in message
    for name, value in TAMPERED.items():
        assert f"{name} " in message and f"-> {value!r}" in message, (name, message)
    assert str(state / "nightly") in message, "the fix names the witness"


def test_the_proposers_environment_holds_no_optimizer_setting_or_database_address(cli, repo, tmp_path, monkeypatch,
                                                                                 isolated):
    url = f"sqlite:///{tmp_path / 'team.db'}"
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", url)
    monkeypatch.setenv("PGPASSWORD", "hunter2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("SOME_TOOL_CONFIG", url)
    monkeypatch.setenv("OPTIMIZER_PROPOSER_ENV", "SOME_TOOL_CONFIG,MY_AGENT_TOKEN")
    monkeypatch.setenv("MY_AGENT_TOKEN", "token")
    propose_with(monkeypatch, f"{APPEND_RULE} && env")  # into the proposer's log
    code, out, err = cli("run")
    assert code == 0, out + err
    dump = next(isolated.glob("runs/*/proposal-1.log")).read_text()
    seen = dict(line.split("=", 1) for line in dump.splitlines() if "=" in line)
    assert "PATH" in seen and "HOME" in seen, dump
    assert not [name for name in seen if name.startswith("OPTIMIZER_") or name.startswith("PG")], sorted(seen)
    assert url not in dump and "hunter2" not in dump
    assert seen["OPENAI_API_KEY"] == "sk-test" and seen["MY_AGENT_TOKEN"] == "token"
    assert "SOME_TOOL_CONFIG" not in seen, "a variable holding the store's address is left out even when named"


def test_proposer_env_refuses_a_name_never_passed(cli, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_PROPOSER_ENV", "OPTIMIZER_DATABASE_URL")
    code, out, err = cli("run", "--dry-run", "--agent-model", "mock/sim")
    assert code == 2, out + err
    assert "proposer_env" in err and "OPTIMIZER_DATABASE_URL is never passed to a proposer" in err
