"""`optimizer nightly --resume`: a resumed night is the same night. It goes on with every setting
it started with, whatever the resuming command's environment says; a flag that disagrees is
refused unless overridden; and only a night of this repository is resumed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.end_to_end.test_nightly import nightly
from tests.helpers import FACT_RULE, PROJECT_ROOT, after_data_line, git, project_repo, script

OPTIMIZER = str(Path(sys.executable).parent / "optimizer")
SIM_PATCHER = f"{sys.executable} {PROJECT_ROOT / 'benchmarks/sim_patcher.py'} {{request}} {{workdir}}"
NIGHT_FLAGS = ["--suite", "card_agent", "--base", "main", "--max-iterations", "2", "--time-limit", "8h",
               "--budget-usd", "50", "--budget-tokens", "100000000", "--patience", "1", "--order", "alternate",
               "--merge", "--agent-model", "mock/sim", "--judge-model", "mock/sim", "--patcher-model", "mock/patcher",
               "--proposer", "command", "--trials", "2", "--search-rollouts", "24", "--target-buckets", "2",
               "--min-bucket-pairs", "3", "--date", "2026-11-24"]
"""Every flag of `optimizer nightly` that a night keeps, none at its default."""


def _env(repo: Path, state: Path, **settings: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(OPTIMIZER_ROOT=str(repo), OPTIMIZER_STATE_DIR=str(state), OPTIMIZER_RETRY_BASE_DELAY="0.01", CI="true",
               **{f"OPTIMIZER_{name.upper()}": value for name, value in settings.items()})
    return env


STARTING = {"proposer_command": SIM_PATCHER, "lone_task_factor": "1"}
"""Settings the night starts with from its environment."""
RESUMING = {"agent_model": "mock/oracle", "judge_model": "mock/oracle", "patcher_model": "mock/oracle"}
"""What the resuming commands' environment says instead: no proposer command, the default lone
task factor (5) and other models."""


def _trials(state: Path) -> int:
    try:
        with sqlite3.connect(state / "optimizer.db", timeout=5) as db:
            return db.execute("select count(*) from trials").fetchone()[0]
    except sqlite3.Error:
        return 0


def _first_baseline(state: Path) -> int:
    """The trials of a night's first baseline."""
    with sqlite3.connect(state / "optimizer.db") as db:
        return db.execute("select count(*) from trials where run_id = (select run_id from runs where kind = "
                          "'baseline' order by started_at limit 1)").fetchone()[0]


def _outcome(repo: Path, state: Path, summary: dict) -> dict:
    commits = git(repo, "log", "--format=%T %s", f"{summary['base_commit']}..{summary['branch']}").splitlines()
    return {"branch": summary["branch"], "commits": commits, "trials": _trials(state), "merged": summary["merged"],
            "statuses": [row["status"] for row in summary["iterations"]], "stop": summary["stop_reason"]}


def _kill_at(command: list[str], repo: Path, env: dict, state: Path, trials: int) -> None:
    process = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while process.poll() is None and _trials(state) < trials and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, f"the night ended before {trials} trials were on record"
    process.kill()  # SIGKILL
    process.wait()


def _uninterrupted_night(repo: Path, tmp_path: Path) -> tuple[Path, Path, Path, dict]:
    """The night run to its end in `repo`, beside a copy of the clean checkout for the night
    that will be killed: (that copy, its state folder, the reference's state folder, the
    reference's outcome)."""
    git(repo, "stash", "-u")  # a clean checkout, as --merge needs
    killed = tmp_path / "killed"
    subprocess.run(["cp", "-a", str(repo), str(killed)], check=True)
    reference_state, state = tmp_path / "reference-state", tmp_path / "killed-state"
    done = subprocess.run([OPTIMIZER, "nightly", "--plain", *NIGHT_FLAGS, "--json", str(tmp_path / "reference.json")],
                          cwd=repo, env=_env(repo, reference_state, **STARTING), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return killed, state, reference_state, _outcome(repo, reference_state,
                                                    json.loads((tmp_path / "reference.json").read_text()))


@pytest.mark.slow
def test_a_night_killed_in_its_baseline_resumes_with_every_setting_it_started_with(repo, tmp_path):
    """Killed twice in its first baseline (the second time after resuming in an environment that
    says otherwise), the night ends as the uninterrupted one: the same branch and commits, and
    not one trial more."""
    killed, state, reference_state, reference = _uninterrupted_night(repo, tmp_path)
    assert reference["branch"] == "optimizer/nightly-2026-11-24" and reference["merged"], json.dumps(reference)
    assert reference["statuses"][0] == "accepted" and len(reference["statuses"]) == 2, reference

    baseline = _first_baseline(reference_state)
    _kill_at([OPTIMIZER, "nightly", "--plain", *NIGHT_FLAGS], killed, _env(killed, state, **STARTING), state,
             baseline // 10)
    resuming = _env(killed, state, **RESUMING)
    _kill_at([OPTIMIZER, "nightly", "--resume", "--plain"], killed, resuming, state, baseline // 2)
    done = subprocess.run([OPTIMIZER, "nightly", "--resume", "--plain", "--trials", "2", "--date", "2026-11-24",
                           "--json", str(tmp_path / "resumed.json")], cwd=killed, env=resuming, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _outcome(killed, state, json.loads((tmp_path / "resumed.json").read_text())) == reference
    assert "keeping the night's agent_model = 'mock/sim'" in done.stderr


def crash_every_iteration(monkeypatch) -> list:
    """Every iteration of a night crashes at once, leaving the night resumable; the returned list
    collects the settings each one started with (their values, by name). The mock patcher is
    given a skill, so the night's check of its proposer passes (no proposal is ever asked for)."""
    from optimizer.nightly import night as nightly_module

    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "0.5")
    seen = []

    def crash(ctx, **_):
        seen.append(SimpleNamespace(**ctx.settings.values))
        raise RuntimeError("stopped here by the test")

    monkeypatch.setattr(nightly_module, "run_iteration", crash)
    return seen


@pytest.fixture
def crashed_night(cli, repo, tmp_path, monkeypatch):
    """A night started with --trials 2 on mock/sim, crashed in its first iteration; holds the
    settings each later iteration starts with."""
    seen = crash_every_iteration(monkeypatch)
    code, _, output = nightly(cli, tmp_path, "--trials", "2", "--agent-model", "mock/sim")
    assert code == 3 and "stopped here by the test" in output
    seen.clear()
    return seen


def test_a_resume_flag_that_disagrees_with_the_night_is_refused_naming_it(cli, crashed_night, tmp_path):
    code, _, output = nightly(cli, tmp_path, "--resume", "--trials", "3")
    assert code == 2 and crashed_night == []
    assert "--trials 3 disagrees with the night being resumed, which runs with 2" in output
    assert "--override trials" in output
    code, _, output = nightly(cli, tmp_path, "--resume", "--date", "2027-01-01")
    assert code == 2 and "--date 2027-01-01 disagrees" in output and crashed_night == []
    code, _, output = nightly(cli, tmp_path, "--resume", "--trials", "2", "--agent-model", "mock/sim")
    assert code == 3 and [settings.trials for settings in crashed_night] == [2]  # agreeing flags are fine


def test_the_gates_budget_flags_are_the_nights_settings(cli, repo, tmp_path, monkeypatch):
    """`--max-rollouts` and `--batch-pairs` set the night's gate as `run`'s do (the embedded model's
    shipped settings lower both), and a resume keeps them."""
    seen = crash_every_iteration(monkeypatch)
    code, _, output = nightly(cli, tmp_path, "--max-rollouts", "80", "--batch-pairs", "4")
    assert code == 3 and "stopped here by the test" in output
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 3, output
    assert [(s.max_rollouts, s.batch_pairs) for s in seen] == [(80, 4), (80, 4)]


def test_the_environment_of_a_resume_does_not_change_the_night(cli, crashed_night, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "mock/oracle")
    monkeypatch.setenv("OPTIMIZER_LONE_TASK_FACTOR", "5")
    monkeypatch.setenv("OPTIMIZER_CONCURRENCY", "3")
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 3
    (settings,) = crashed_night
    assert (settings.agent_model, settings.trials, settings.lone_task_factor) == ("mock/sim", 2, 1)
    assert settings.concurrency == 3  # how much runs at once is this machine's
    assert "keeping the night's agent_model = 'mock/sim' (this invocation's settings say 'mock/oracle'" in output


def test_an_override_changes_the_rest_of_the_night(cli, crashed_night, tmp_path):
    code, _, output = nightly(cli, tmp_path, "--resume", "--override", "trials", "--trials", "3")
    assert code == 3, output
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 3, output
    assert [settings.trials for settings in crashed_night] == [3, 3]
    for args, field in ((["--resume", "--override", "base"], "--override"),
                        (["--resume", "--override", "trails"], "--override"),
                        (["--override", "trials", "--trials", "3"], "--override")):
        code, _, output = nightly(cli, tmp_path, *args)
        assert code == 2 and f"field '{field}'" in output, (args, output)
    assert len(crashed_night) == 2


def test_a_night_of_another_repository_is_never_resumed(cli, crashed_night, tmp_path, monkeypatch):
    other = project_repo(tmp_path / "other", {"other.txt": "another history\n"})  # the same store
    monkeypatch.setenv("OPTIMIZER_ROOT", str(other))
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 2 and crashed_night == [], output
    assert "no unfinished nightly job of this repository to resume (1 of other repositories" in output
    assert "Traceback" not in output


def test_a_night_whose_commits_are_not_in_this_clone_is_not_resumed(cli, repo, tmp_path, monkeypatch):
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))  # the same repository, cloned before the night's base
    git(repo, "commit", "-qam", "a newer base")
    crash_every_iteration(monkeypatch)
    code, _, output = nightly(cli, tmp_path, "--agent-model", "mock/sim")
    assert code == 3, output
    monkeypatch.setenv("OPTIMIZER_ROOT", str(clone))
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 2, output
    assert f"was started in {repo.resolve()}" in output and "is not in this repository" in output


def _kind_trials(state: Path, kind: str) -> int:
    """The trials recorded in a night's first run of `kind`."""
    try:
        with sqlite3.connect(state / "optimizer.db", timeout=5) as db:
            return db.execute("select count(*) from trials where run_id = (select run_id from runs where kind = ? "
                              "order by started_at limit 1)", (kind,)).fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_a_night_killed_inside_its_gate_resumes_as_the_same_night(repo, tmp_path):
    """Killed while the first iteration's gate runs the candidate, the resumed iteration takes in
    the candidate, screening and base trials the killed process recorded (the same prompts, at
    the same indexes) instead of starting its comparison over: the night ends as the
    uninterrupted one, with the same branch, commits and decisions, and not one trial more."""
    killed, state, reference_state, reference = _uninterrupted_night(repo, tmp_path)
    candidate = _kind_trials(reference_state, "candidate")
    assert candidate >= 4 and reference["statuses"][0] == "accepted", reference

    env = _env(killed, state, **STARTING)
    process = subprocess.Popen([OPTIMIZER, "nightly", "--plain", *NIGHT_FLAGS], cwd=killed, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while process.poll() is None and _kind_trials(state, "candidate") < candidate // 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the night ended before its gate had run half of the candidate's trials"
    process.kill()  # SIGKILL, inside the first iteration's gate
    process.wait()
    assert 0 < _kind_trials(state, "candidate") < candidate
    done = subprocess.run([OPTIMIZER, "nightly", "--resume", "--plain", "--json", str(tmp_path / "resumed.json")],
                          cwd=killed, env=_env(killed, state, **RESUMING), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _outcome(killed, state, json.loads((tmp_path / "resumed.json").read_text())) == reference


def test_a_decision_made_by_an_iteration_a_kill_interrupted_keeps_its_share_of_night_alpha(cli, repo, tmp_path,
                                                                                         monkeypatch):
    """Killed after its first candidate's decision and before its second: the iteration runs
    again, and its decisions are tested at the levels after that one (2nd, 3rd), not from the
    first again; the summary's bound counts all three."""
    from optimizer.loop import candidate as loop

    monkeypatch.setenv("OPTIMIZER_CANDIDATES", "2")
    script(tmp_path, monkeypatch, *[after_data_line(FACT_RULE)] * 4)
    gate_one = loop.Candidates.gate_one

    def killed_after_the_first_decision(self, *args, **kwargs):
        record = gate_one(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(loop.Candidates, "gate_one", killed_after_the_first_decision)
    code, _, output = nightly(cli, tmp_path, "--max-iterations", "1")
    assert code != 0 and "gate: decision 1 of the night, improvement test at alpha 0.0500" in output, output
    monkeypatch.setattr(loop.Candidates, "gate_one", gate_one)
    code, summary, output = nightly(cli, tmp_path, "--resume")
    assert code == 0, output
    assert "iteration 1 was interrupted; it runs again" in output
    assert "gate: decision 2 of the night, improvement test at alpha 0.0167" in output, output
    assert "decision 1 of the night" not in output
    assert summary["gate_decisions"] == 1 + output.count("of the night, improvement test at alpha"), summary


def test_resuming_a_finished_night_says_which_it_was_and_where_it_last_ran(cli, repo, tmp_path, monkeypatch):
    """A night finished by a resume in another checkout looks, to its owner, like no night at all;
    the refusal names the newest night of the repository and where it last ran."""
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1")
    assert code == 0, output
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 2, output
    assert (f"its newest, {summary['nightly_id']} on {summary['branch']}, is finished, last run in "
            f"{repo.resolve()} on ") in output, output


def test_a_new_night_abandons_the_unfinished_one_so_a_later_resume_never_goes_back_to_it(
        cli, repo, isolated, tmp_path, monkeypatch):
    from optimizer.nightly import night as nightly_module

    real = nightly_module.run_iteration
    crash_every_iteration(monkeypatch)
    code, _, output = nightly(cli, tmp_path, "--trials", "2", "--agent-model", "mock/sim")
    assert code == 3 and "stopped here by the test" in output
    with sqlite3.connect(isolated / "optimizer.db") as db:
        (crashed,) = db.execute("select nightly_id from nightlies").fetchone()
    monkeypatch.setattr(nightly_module, "run_iteration", real)
    code, _, output = nightly(cli, tmp_path, "--trials", "1", "--max-iterations", "1", "--agent-model", "mock/sim")
    assert code == 0, output
    assert f"nightly {crashed} (crashed, on optimizer/nightly-2026-11-23) was not resumed: marked abandoned" in output
    with sqlite3.connect(isolated / "optimizer.db") as db:
        statuses = dict(db.execute("select nightly_id, status from nightlies"))
    assert statuses[crashed] == "abandoned" and len(statuses) == 2
    code, _, output = nightly(cli, tmp_path, "--resume")
    assert code == 2 and "there is no unfinished nightly job of this repository to resume" in output
