"""A proposal is the proposer's final clone against the base commit, whatever it committed, and
a proposer command that fails, hangs or is interrupted (Ctrl-C, SIGTERM, SIGHUP) leaves no patch
and no process behind, a daemon it started with `setsid` included.

End to end with the `command` proposer on a throw-away repository (see tests/end_to_end/test_loop.py), plus
`CommandProposer` on its own for what needs no iteration around it."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.helpers import FACT_RULE, PROMPT, git, optimizer_branches, snapshot, stopped_by

TASK = "suites/card_agent/tasks/positive/card_event_standup_zoom.json"
BASELINE_ROLLOUTS = 100
"""What `optimizer run` spends on the card suite before any proposal (see tests/end_to_end/test_loop.py)."""
APPEND_RULE = f"printf '%s\\n' {shlex.quote(FACT_RULE)} >> {PROMPT}"
COMMIT = "git add -A && git commit -qm 'the proposer commits its own work'"


def propose_with(monkeypatch, command: str, timeout_s: float | None = None) -> None:
    """The `command` proposer running `command` in its clone, once it has found its request."""
    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")
    monkeypatch.setenv("OPTIMIZER_PROPOSER_COMMAND", f"test -f {{request}} && {{ {command}; }}")
    if timeout_s is not None:
        monkeypatch.setenv("OPTIMIZER_PROPOSER_TIMEOUT", str(timeout_s))


def run(cli, tmp_path: Path) -> tuple[dict, dict]:
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    return summary, summary["proposals"][0]


def marked_processes(marker: str, wait_s: float = 5.0) -> list[int]:
    """Live processes whose command line holds `marker`, after giving killed ones `wait_s` to go
    (a zombie has an empty command line, so it does not count)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # the process ended while being looked at
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def marked_sleeps(marker: str, pid_file: Path) -> str:
    """Shell text that starts a background `sleep 300` (its pid written to `pid_file`) and then
    sleeps itself, both with `marker` in their command line."""
    return (f"(exec -a {marker}-child sleep 300) & echo $! > {shlex.quote(str(pid_file))}; "
            f"exec -a {marker}-main sleep 300")


@pytest.mark.parametrize("command, says", [
    (f"git rm -q {TASK} && {COMMIT} && {APPEND_RULE}", f"files: only {PROMPT} may change; the patch also changes {TASK}"),
    (f"echo '- card_event_standup_zoom shows the event rule.' >> {PROMPT} && {COMMIT} && {APPEND_RULE}",
     "hard_coding: the patch copies evaluation data: task id 'card_event_standup_zoom'"),
], ids=["committed-task-file-deletion", "committed-task-id"])
def test_what_a_proposer_committed_meets_the_checks(cli, repo, tmp_path, monkeypatch, command, says):
    propose_with(monkeypatch, command)
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "rejected_check", proposal
    assert proposal["reason"].startswith(says)
    assert proposal["rollouts"] == 0 and summary["rollouts"] == BASELINE_ROLLOUTS
    assert optimizer_branches(repo) == []
    assert (repo / TASK).is_file()


def test_a_committed_task_file_deletion_never_reaches_main_through_nightly_merge(cli, repo, tmp_path, monkeypatch):
    propose_with(monkeypatch, f"git rm -q {TASK} && {COMMIT} && {APPEND_RULE}")
    before = snapshot(repo)
    out_json = tmp_path / "nightly.json"
    code, out, err = cli("nightly", "--date", "2026-11-23", "--plain", "--max-iterations", "1", "--merge",
                         "--json", str(out_json))
    assert code == 0, out + err
    assert [row["status"] for row in json.loads(out_json.read_text())["iterations"]] == ["rejected"]
    assert git(repo, "rev-parse", "HEAD") == before["commit"], "nothing was merged"
    assert git(repo, "ls-tree", "--name-only", "HEAD", TASK).strip() == TASK


def test_an_auto_committing_proposer_gets_one_commit_of_ours_holding_exactly_its_change(cli, repo, tmp_path,
                                                                                       monkeypatch):
    propose_with(monkeypatch, f"{APPEND_RULE} && {COMMIT}")
    base = git(repo, "rev-parse", "HEAD").strip()
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "accepted", proposal
    branch = proposal["branch"]
    assert git(repo, "rev-list", f"{base}..{branch}").split() == [git(repo, "rev-parse", branch).strip()]
    assert git(repo, "rev-parse", f"{branch}^").strip() == base
    assert git(repo, "log", "-1", "--format=%an", branch).strip() == "prompt-optimizer"
    assert git(repo, "diff", "--name-only", base, branch).split() == [PROMPT]
    changed = [line for line in git(repo, "diff", base, branch).splitlines()
               if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    assert changed == ["+" + FACT_RULE]


def test_a_proposer_that_hangs_times_out_with_nothing_left_running(cli, repo, tmp_path, monkeypatch, isolated):
    marker = f"proposer-hang-{uuid.uuid4().hex}"
    child = Path("/dev/stdout")  # into its log: the host's /tmp is not the command's under bubblewrap
    propose_with(monkeypatch, f"{APPEND_RULE}; {marked_sleeps(marker, child)}", timeout_s=3)
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "no_patch", proposal
    assert proposal["reason"] == "the proposer command timed out after 3 s; its changes are not used"
    assert proposal["rollouts"] == 0 and summary["rollouts"] == BASELINE_ROLLOUTS
    log = next(isolated.glob("runs/*/proposal-1.log")).read_text()
    assert log.strip().isdigit(), "the background child was started"
    assert marked_processes(marker) == []


def test_a_proposer_that_fails_after_editing_gives_no_patch_and_review_says_why(cli, repo, tmp_path, monkeypatch):
    propose_with(monkeypatch, f"{APPEND_RULE} && exit 3")
    summary, proposal = run(cli, tmp_path)
    reason = "the proposer command failed with exit code 3; its changes are not used"
    assert proposal["status"] == "no_patch" and proposal["reason"] == reason
    assert proposal["rollouts"] == 0 and summary["rollouts"] == BASELINE_ROLLOUTS
    assert optimizer_branches(repo) == []
    code, out, err = cli("review", proposal["branch"])
    assert code == 0, out + err
    assert f"not evaluated: {reason}" in out


@pytest.mark.parametrize("command, says", [
    (f"rm {PROMPT}", f"prompt_file: the patch removes {PROMPT}"),
    (f"git rm -q {PROMPT} && {COMMIT}", f"prompt_file: the patch removes {PROMPT}"),
    (f"ln -sf ../../{TASK} {PROMPT}", f"prompt_file: the patch removes {PROMPT}"),
    (f"printf 'caf\\xe9\\n' >> {PROMPT}", f"prompt_file: {PROMPT} is not UTF-8 text after the patch"),
], ids=["deleted", "deleted-and-committed", "replaced-by-a-link", "not-utf8"])
def test_a_prompt_file_the_agent_cannot_read_is_rejected_before_any_rollout(cli, repo, tmp_path, monkeypatch,
                                                                            command, says):
    monkeypatch.setenv("OPTIMIZER_MAX_CHANGED_LINES", "200")  # the whole prompt is within the line budget
    propose_with(monkeypatch, command)
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "rejected_check", proposal
    assert proposal["reason"].startswith(says)
    assert proposal["rollouts"] == 0 and summary["rollouts"] == BASELINE_ROLLOUTS


def test_a_proposer_that_removes_its_clone_is_rejected_and_the_iteration_goes_on(cli, repo, tmp_path,
                                                                                     monkeypatch):
    propose_with(monkeypatch, "rm -rf {workdir}")
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "rejected_check", proposal
    assert proposal["reason"].startswith("unreadable: the proposal's work tree ") and "is gone" in proposal["reason"]
    assert summary["status"] == "rejected" and optimizer_branches(repo) == []


def test_the_change_is_the_final_clone_against_the_base_whatever_was_committed_or_ignored(tmp_path):
    import git as gitpython

    from optimizer import gitops
    from optimizer.proposal.box import open_box

    root = tmp_path / "repo"
    root.mkdir()
    for name, text in {"p.md": "a\n", "other.md": "o\n", "keep.log": "k\n", ".gitignore": "*.log\n"}.items():
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "-A")
    git(root, "add", "-f", "keep.log")  # tracked although ignored: unchanged, so not part of the change
    git(root, "commit", "-qm", "base")
    base = git(root, "rev-parse", "HEAD").strip()
    repo = gitpython.Repo(root)
    with open_box(repo, branch="optimizer/t", base_commit=base, parent=tmp_path / "boxes") as box:
        workdir = box.workdir
        (workdir / "p.md").write_text("a\nb\n")
        git(workdir, "rm", "-q", "other.md")
        git(workdir, "commit", "-qam", "the proposer's own commit")
        (workdir / "notes.txt").write_text("untracked\n")
        (workdir / "scratch.log").write_text("new and ignored\n")
        change = gitops.final_change(repo, workdir, base)
        assert change.files == ["notes.txt", "other.md", "p.md"]
        assert gitops.file_at(repo, change.tree, "p.md") == b"a\nb\n"
        assert gitops.file_at(repo, change.tree, "other.md") is None
        commit = gitops.commit_change(repo, "optimizer/t", base, change.tree, "ours\n")
    assert git(root, "rev-list", f"{base}..optimizer/t").split() == [commit]
    assert git(root, "diff", "--name-only", base, "optimizer/t").split() == change.files


def command_request(tmp_path: Path):
    from optimizer.proposal.proposers import ProposalRequest

    workdir = tmp_path / "work"
    workdir.mkdir()
    request_path = tmp_path / "request.md"
    request_path.write_text("Fix the prompt.\n")
    return ProposalRequest(request="Fix the prompt.\n", request_path=request_path, prompt_file="prompt.md",
                           workdir=workdir, ordinal=1)


def test_what_a_proposer_left_running_is_stopped_when_it_exits(tmp_path):
    from optimizer.proposal.command import CommandProposer

    marker = f"proposer-leftover-{uuid.uuid4().hex}"
    child = tmp_path / "child.pid"
    command = f"(exec -a {marker} sleep 300) & echo $! > {shlex.quote(str(child))}; echo done {{request}}"
    proposal = CommandProposer(command, timeout_s=60).propose(command_request(tmp_path))
    assert proposal.error is None and proposal.log.startswith("done ")
    assert child.read_text().strip().isdigit()
    assert marked_processes(marker) == []


def test_ctrl_c_during_a_proposer_stops_all_of_its_processes(tmp_path):
    from optimizer.proposal.command import CommandProposer

    marker = f"proposer-interrupted-{uuid.uuid4().hex}"
    child = tmp_path / "child.pid"

    def interrupt_once_started():
        deadline = time.monotonic() + 30
        while not child.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    proposer = CommandProposer(f"test -f {{request}}; {marked_sleeps(marker, child)}", timeout_s=120)
    with pytest.raises(KeyboardInterrupt):
        proposer.propose(command_request(tmp_path))
    assert child.read_text().strip().isdigit()
    assert marked_processes(marker) == []


def test_the_ctrl_c_test_holds_when_the_suite_starts_with_sigint_ignored(tmp_path):
    """`make test &` from a non-interactive shell starts the tests with SIGINT ignored."""
    test = f"{Path(__file__).relative_to(PROJECT_ROOT)}::test_ctrl_c_during_a_proposer_stops_all_of_its_processes"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
                           str(tmp_path / "inner"), test], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("stop, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["sigterm", "sighup"])
def test_sigterm_or_sighup_during_a_proposer_ends_the_iteration_interrupted_with_nothing_left(
        repo, isolated, monkeypatch, stop, code):
    marker = f"proposer-stopped-{uuid.uuid4().hex}"
    propose_with(monkeypatch, marked_sleeps(marker, Path("/dev/stdout")))

    def proposer_running(process):
        deadline = time.monotonic() + 300  # the run's baseline comes first: minutes on a loaded host
        while not marked_processes(marker, wait_s=0) and time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()
            time.sleep(0.1)

    exit_code, err = stopped_by(stop, ["run"], repo, proposer_running)
    name = signal.Signals(stop).name
    assert exit_code == code, err
    assert f"stopped by {name}" in err
    assert marked_processes(marker) == []
    assert not any((isolated / "boxes").iterdir()), "the box is removed"
    with sqlite3.connect(isolated / "optimizer.db") as db:
        [(status, summary)] = db.execute("select status, summary_json from iterations").fetchall()
    assert status == "interrupted"
    assert json.loads(summary)["stop_reason"] == f"{name}: the process was asked to stop"


@pytest.mark.slow
@pytest.mark.parametrize("subreaper", [True, False], ids=["as_subreaper", "by_its_box_mark"])
def test_a_daemon_the_proposer_started_with_setsid_is_killed_before_it_writes_to_the_checkout(
        cli, repo, tmp_path, monkeypatch, isolated, subreaper):
    """Found as a child of the optimizer (a subreaper), or where it cannot be one (the daemon goes
    to init) by the box its environment names."""
    monkeypatch.setattr("optimizer.proposal.box.find_bwrap", lambda: None)  # unconfined: bubblewrap's pid namespace
    marker = f"proposer-daemon-{uuid.uuid4().hex}"                   # would end the daemon by itself
    if not subreaper:
        monkeypatch.setattr("optimizer.nightly.reaper._subreaper", lambda: None)
    daemon = f"sleep 60; echo {marker} >> {shlex.quote(str(repo / PROMPT))}"  # seconds the harness has, on a busy host
    # the proposer goes on for a second after starting the daemon, so the daemon is out of its group when it exits
    propose_with(monkeypatch, f"{APPEND_RULE}; setsid sh -c {shlex.quote(daemon)} & sleep 1; exit 0")
    before = (repo / PROMPT).read_text()
    summary, proposal = run(cli, tmp_path)
    assert proposal["status"] == "accepted", proposal
    assert marked_processes(marker) == []  # gone, so it never writes
    assert (repo / PROMPT).read_text() == before
    log = next(isolated.glob("runs/*/proposal-1.log")).read_text()
    assert re.search(r"the proposer command left [12] process\(es\) running outside its process group", log)


def test_a_proposer_command_that_fails_shows_the_end_of_its_log_on_the_console(cli, repo, tmp_path, monkeypatch,
                                                                              isolated):
    propose_with(monkeypatch, "no-such-coding-agent --prompt {request}")
    code, out, err = cli("run")
    assert code == 0, out + err
    log = next(isolated.glob("runs/*/proposal-1.log"))
    shown = f"the proposer command failed with exit code 127; its changes are not used; the end of its log ({log}):"
    assert shown in err
    assert "no-such-coding-agent: command not found" in err.split(shown, 1)[1]


def test_a_command_proposer_gets_the_full_request_whatever_the_patcher_model():
    """`auto` gives a small embedded patcher worked examples to add (and a contrastive rule to
    write where none is left); a coding agent run as a command edits the file the full request
    names (a contrast request names none)."""
    from optimizer.proposal.proposers import patch_format
    from optimizer.settings.config import Settings

    embedded = "local/qwen2.5-coder-1.5b"
    assert patch_format(Settings(proposer="llm", patcher_model=embedded).proposal) == "example"
    assert patch_format(Settings(proposer="command", patcher_model=embedded).proposal) == "edits"
    assert patch_format(Settings(proposer="command", patcher_model=embedded,
                                 patch_format="rule").proposal) == "rule"


UNCONFINED_OPTIMIZER = ("import sys, optimizer.proposal.box as box; box.find_bwrap = lambda: None; "
                        "from optimizer.cli import main; sys.argv[0] = 'optimizer'; main()")
"""`optimizer` without bubblewrap, as a process of its own (what a machine without it runs)."""


def _alive(pid: int) -> bool:
    fields = Path(f"/proc/{pid}/stat")
    return fields.exists() and fields.read_text().rpartition(")")[2].split()[0] != "Z"


@pytest.mark.slow
def test_a_proposer_left_running_by_a_killed_run_is_stopped_by_the_next_one(repo, tmp_path):
    """kill -9 of `optimizer run` (the OOM killer, a hard CI cancel) runs none of its cleanup: the
    unconfined proposer is re-parented to init and keeps running. The next run finds it by the
    box its environment names and kills it before anything else."""
    started = tmp_path / "proposer.pid"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(OPTIMIZER_ROOT=str(repo), OPTIMIZER_STATE_DIR=str(tmp_path / "state"), OPTIMIZER_PLAIN="1",
               OPTIMIZER_AGENT_MODEL="mock/sim", OPTIMIZER_JUDGE_MODEL="mock/sim",
               OPTIMIZER_PATCHER_MODEL="mock/sim", OPTIMIZER_LONE_TASK_FACTOR="1", OPTIMIZER_PROPOSER="command",
               OPTIMIZER_PROPOSER_COMMAND=f"test -f {{request}} && {{ sleep 600 & echo $! > {started}; wait; }}")
    run = subprocess.Popen([sys.executable, "-c", UNCONFINED_OPTIMIZER, "run"], cwd=repo, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # the run's baseline comes first: minutes on a loaded host
        while not (started.exists() and started.read_text().strip()) and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before its proposer started"
            time.sleep(0.2)
        sleeper = int(started.read_text())
    finally:
        run.kill()  # SIGKILL
        run.wait(timeout=30)
    time.sleep(0.5)
    assert _alive(sleeper), "without the next run's check the proposer outlives the killed run"
    again = subprocess.run([sys.executable, "-c", UNCONFINED_OPTIMIZER, "run", "--dry-run"], cwd=repo, env=env,
                           capture_output=True, text=True, timeout=300)
    try:
        assert again.returncode == 0, again.stdout + again.stderr
        assert "stopped 2 process(es) a proposer command of a killed run left running" in again.stderr + again.stdout
        assert not _alive(sleeper)
        assert not list((tmp_path / "state" / "boxes").iterdir())
    finally:
        if _alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
