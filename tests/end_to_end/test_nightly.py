"""`optimizer nightly` on mock/sim + scripted mock/patcher proposals, in a temporary git repository."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.optimizer.nightly.test_lock import HOLD
from tests.helpers import (DATA_LINE, FACT_RULE, LINK_HARM, PROMPT, after_data_line, git, optimizer_branches, script,
                           snapshot)

PERSON_RULE = "- Use person when the note is mainly about remembering someone the user met and details about them."
METRIC_RULE = "- Use metric for a measured value with its unit, such as a reading the user tracks."


def nightly(cli, tmp_path, *args: str) -> tuple[int, dict, str]:
    out_json = tmp_path / "nightly.json"
    code, out, err = cli("nightly", "--date", "2026-11-23", "--plain", "--json", str(out_json), *args)
    summary = json.loads(out_json.read_text()) if out_json.exists() else {}
    return code, summary, out + err


def test_the_nightly_passes_its_gate_and_target_options_to_every_iteration(cli, repo, isolated, tmp_path,
                                                                             monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1", "--min-bucket-pairs", "3",
                                    "--target-buckets", "2")
    assert code == 0, output
    with sqlite3.connect(isolated / "optimizer.db") as db:
        (stored,) = db.execute("select settings_json from iterations").fetchone()
    settings = json.loads(stored)
    assert (settings["min_bucket_pairs"], settings["target_buckets"]) == (3, 2)


def test_good_proposals_stack_on_the_nightly_branch_in_order(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE), after_data_line(LINK_HARM),
           after_data_line(PERSON_RULE, METRIC_RULE))
    before = snapshot(repo)
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "3")
    assert code == 0, output
    assert [row["status"] for row in summary["iterations"]] == ["accepted", "rejected", "accepted"], output
    assert summary["branch"] == "optimizer/nightly-2026-11-23"
    assert summary["stop_reason"] == "max_iterations (3)"
    for row in (summary["iterations"][0], summary["iterations"][2]):  # the holdout beside the train split
        assert row["holdout"]["pairs"] > 0 and row["train"]["pairs"] > row["holdout"]["pairs"]
        line = next(line for line in output.splitlines() if line.strip().startswith(f"{row['number']}. accepted"))
        assert f"holdout {row['holdout']['before']:.2f} -> {row['holdout']['after']:.2f}" in line, line
    assert "holdout" not in summary["iterations"][1]
    base = before["commit"].strip()
    log = git(repo, "log", "--format=%H %s", f"{base}..{summary['branch']}").splitlines()
    assert len(log) == 2
    newest, oldest = log[0].split(" ", 1), log[1].split(" ", 1)
    assert newest[0] == summary["tip_commit"] == summary["iterations"][2]["commit"]
    assert oldest[0] == summary["iterations"][0]["commit"]
    first = git(repo, "show", oldest[0], "--", "agents/prompts/card_agent.md")
    second = git(repo, "show", newest[0], "--", "agents/prompts/card_agent.md")
    assert "+" + FACT_RULE in first and LINK_HARM not in first
    # the third answer's person rule does nothing for its target, template_metric: dropped before the gate
    assert "+" + METRIC_RULE in second and "+" + PERSON_RULE not in second and LINK_HARM not in second
    assert "+" + FACT_RULE not in second
    assert "fact_preservation" in oldest[1]
    assert git(repo, "diff", "--name-only", f"{base}..{summary['branch']}").split() == ["agents/prompts/card_agent.md"]
    # one branch is left: the night's; the proposal branches are gone, the checkout untouched
    assert optimizer_branches(repo) == [summary["branch"]]
    assert snapshot(repo) == before
    assert (isolated / "optimizer.db").exists() and not (isolated / "nightly.lock").exists()
    assert not (isolated / "boxes").exists() or not any((isolated / "boxes").iterdir())
    with sqlite3.connect(isolated / "optimizer.db") as db:
        status, state = db.execute("select status, state_json from nightlies").fetchone()
        roles = {role for (role,) in db.execute("select distinct role from ledger")}
    assert status == "finished" and json.loads(state)["accepted"] == 2
    assert {"agent", "patcher"} <= roles


def improvement_levels(store: Path) -> list[float]:
    """The level each gated proposal's improvement test was run at, in the order decided."""
    with sqlite3.connect(store) as db:
        decisions = [json.loads(row) for (row,) in db.execute(
            "select decision_json from proposals where decision_json is not null order by id")]
    return [next(rule["numbers"]["alpha"] for rule in decision["rules"] if "alpha" in rule.get("numbers", {}))
            for decision in decisions]


def test_a_nights_decisions_spend_night_alpha_so_its_chance_of_any_false_accept_stays_under_it(
        cli, repo, isolated, tmp_path, monkeypatch):
    """The j-th candidate a night gates is tested at night_alpha / (j (j + 1)) (0.05, 0.0167,
    0.0083 at the default 0.10): their sum, the bound on merging anything by chance, is in the
    night's summary; an `optimizer run` alone tests at `alpha`."""
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE), after_data_line(LINK_HARM),
           after_data_line(PERSON_RULE, METRIC_RULE))
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "3")
    assert code == 0, output
    levels = improvement_levels(isolated / "optimizer.db")
    assert levels == pytest.approx([0.05, 0.10 / 6, 0.10 / 12]), levels
    assert summary["gate_decisions"] == 3 and summary["false_accept_bound"] == pytest.approx(0.075), summary
    assert "at most 0.075" in output


def test_the_night_stops_after_consecutive_rejections(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(LINK_HARM), after_data_line(LINK_HARM), after_data_line(FACT_RULE))
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "5", "--patience", "2")
    assert code == 0, output
    assert [row["status"] for row in summary["iterations"]] == ["rejected", "rejected"]
    assert summary["stop_reason"] == "2 consecutive rejected iterations"
    assert git(repo, "rev-parse", summary["branch"]) == git(repo, "rev-parse", "main")


def test_merge_lands_the_stack_on_the_base_branch(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    git(repo, "stash", "-u")  # a clean checkout, as a merge needs
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1", "--merge")
    assert code == 0, output
    assert summary["merged"] is True
    assert FACT_RULE in (repo / "agents/prompts/card_agent.md").read_text()
    assert "Merge optimizer/nightly-2026-11-23" in git(repo, "log", "-1", "--format=%s")
    code, out, err = cli("review")  # the accepted proposal's own branch is gone: stacked, then merged
    assert code == 0, out + err
    assert "(branch deleted: accepted, then merged or stacked on its night's branch; recorded diff)" in out
    assert "not accepted" not in out and FACT_RULE in out


def test_a_second_job_on_the_same_repository_exits_with_a_clear_message(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    lock = isolated / "nightly.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        code, summary, output = nightly(cli, tmp_path)
        assert code == 2 and summary == {}
        assert "another job (optimizer nightly) is running on this repository" in output
        assert f"pid {holder.pid}" in output
        assert optimizer_branches(repo) == []
    finally:
        holder.kill()  # SIGKILL: the lock file stays behind, naming the dead holder
        holder.wait()
    # the holder is gone: its lock is stale and the next job takes it over
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1")
    assert code == 0, output
    assert "taking over a stale lock" in output
    assert not lock.exists()


def test_a_usd_budget_is_never_passed(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE), after_data_line(PERSON_RULE))
    monkeypatch.setenv("OPTIMIZER_MODEL_PRICES", json.dumps({"mock/sim": [10.0, 30.0]}))
    budget = 3.0
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "5", "--budget-usd", str(budget))
    assert code == 0, output
    assert summary["stop_reason"].startswith("budget:"), summary
    assert summary["iterations"][-1]["status"] == "budget_exhausted"
    with sqlite3.connect(isolated / "optimizer.db") as db:
        spent, calls = db.execute("select sum(cost_usd), count(*) from ledger").fetchone()
        largest = db.execute("select max(cost_usd) from ledger").fetchone()[0]
    assert calls > 0 and 0 < spent <= budget, (spent, budget, summary, output[-3000:])
    assert summary["spent_usd"] == spent or abs(summary["spent_usd"] - spent) < 1e-9
    assert budget - spent < largest * 50, (spent, largest)  # it stopped near the budget, not far below it
    assert optimizer_branches(repo) == [summary["branch"]]
    assert not (isolated / "boxes").exists() or not any((isolated / "boxes").iterdir())


def test_history_lists_the_night_its_iterations_scores_and_costs(cli, repo, isolated, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE), after_data_line(LINK_HARM))
    monkeypatch.setenv("OPTIMIZER_MODEL_PRICES", json.dumps({"mock/sim": [1.0, 2.0], "mock/patcher": [3.0, 6.0]}))
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "2")
    assert code == 0, output
    code, out, err = cli("history", "--json", str(tmp_path / "history.json"))
    assert code == 0, out + err
    assert "nightly jobs" in out and "bucket mean score per run" in out and "cost by role" in out
    def no_nan(constant):
        raise AssertionError(f"history.json holds {constant}, which strict JSON parsers reject")

    history = json.loads((tmp_path / "history.json").read_text(), parse_constant=no_nan)
    assert history["nightlies"][0]["accepted"] == 1 and history["nightlies"][0]["iterations"] == 2
    statuses = [row["status"] for row in history["iterations"]]
    assert statuses == ["accepted", "rejected"]
    assert all(row["agent_usd"] > 0 and row["patcher_usd"] > 0 for row in history["iterations"])
    roles = history["cost_by_role"][0]
    assert roles["agent_usd"] > 0 and roles["patcher_usd"] > 0 and roles["judge_usd"] == 0
    assert abs(roles["cost_usd"] - summary["spent_usd"]) < 1e-9
    fact = next(row for row in history["bucket_scores"] if row["bucket"] == "card_agent/fact_preservation")
    assert len([value for key, value in fact.items() if key != "bucket" and value is not None]) >= 3


def _run_env(repo, state, script_path) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(OPTIMIZER_ROOT=str(repo), OPTIMIZER_STATE_DIR=str(state), OPTIMIZER_AGENT_MODEL="mock/sim",
               OPTIMIZER_JUDGE_MODEL="mock/sim", OPTIMIZER_PATCHER_MODEL="mock/patcher",
               OPTIMIZER_MOCK_PATCHER_SCRIPT=str(script_path), OPTIMIZER_RETRY_BASE_DELAY="0.01",
               OPTIMIZER_LONE_TASK_FACTOR=os.environ["OPTIMIZER_LONE_TASK_FACTOR"], CI="true")
    return env


def _final_state(repo, state, summary) -> dict:
    """What must not depend on interruptions: the branch's commits (tree and subject), the
    night's iteration outcomes, every proposal's decision."""
    branch = summary["branch"]
    commits = [line.split(" ", 1) for line in
               git(repo, "log", "--format=%T %s", f"{summary['base_commit']}..{branch}").splitlines()]
    with sqlite3.connect(state / "optimizer.db") as db:
        proposals = db.execute("select status, reason, diff, decision_json from proposals order by id").fetchall()
    iterations = [(row["status"], tuple(row.get("targets") or []), row.get("reason")) for row in summary["iterations"]]
    return {"commits": commits, "iterations": iterations, "proposals": proposals,
            "stop": summary["stop_reason"], "tip_tree": git(repo, "rev-parse", f"{branch}^{{tree}}")}


@pytest.mark.slow
def test_kill_9_at_ten_points_then_resume_ends_as_an_uninterrupted_night(repo, tmp_path):
    import shutil
    import sys
    import time
    from pathlib import Path

    proposals = [after_data_line(FACT_RULE), after_data_line(LINK_HARM), after_data_line(PERSON_RULE, METRIC_RULE)]
    script_path = tmp_path / "proposals.json"
    script_path.write_text(json.dumps(proposals))
    optimizer = str(Path(sys.executable).parent / "optimizer")
    args = ["nightly", "--date", "2026-11-23", "--plain", "--max-iterations", "3"]
    git(repo, "stash", "-u")
    killed_repo = tmp_path / "killed"
    shutil.copytree(repo, killed_repo)
    git(killed_repo, "status")  # a copied index is refreshed on first use; let that happen before the snapshot
    before = snapshot(killed_repo)

    reference_state = tmp_path / "reference-state"
    done = subprocess.run([optimizer, *args, "--json", str(tmp_path / "reference.json")], cwd=repo,
                          env=_run_env(repo, reference_state, script_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    reference = _final_state(repo, reference_state, json.loads((tmp_path / "reference.json").read_text()))
    assert [status for status, _, _ in reference["iterations"]] == ["accepted", "rejected", "accepted"]

    with sqlite3.connect(reference_state / "optimizer.db") as db:
        night_trials = db.execute("select count(*) from trials").fetchone()[0]
    # ten kill points spread over the night by its progress, not by the clock: the k-th process is
    # killed once k/11 of the uninterrupted night's trials are on record (a few milliseconds later,
    # at a varying point: mid-run, mid-write, while starting up)
    kill_points = [night_trials * k // 11 for k in range(1, 11)]
    assert kill_points[0] >= 1, night_trials

    state = tmp_path / "killed-state"
    env = _run_env(killed_repo, state, script_path)

    def trials_recorded() -> int:
        try:
            with sqlite3.connect(state / "optimizer.db", timeout=5) as db:
                return db.execute("select count(*) from trials").fetchone()[0]
        except sqlite3.Error:
            return 0

    kills, command = 0, [optimizer, *args]
    for point in kill_points:
        process = subprocess.Popen(command, cwd=killed_repo, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        waited = 0.0
        while process.poll() is None and trials_recorded() < point and waited < 120:
            time.sleep(0.01)
            waited += 0.01
        if process.poll() is not None:  # the night finished before this kill: nothing left to interrupt
            break
        process.kill()  # SIGKILL
        process.wait()
        kills += 1
        command = [optimizer, "nightly", "--resume", "--plain"]
    assert kills == 10, f"only {kills} of the ten kills landed before the night finished ({night_trials} trials)"
    done = subprocess.run([optimizer, "nightly", "--resume", "--plain", "--json", str(tmp_path / "resumed.json")],
                          cwd=killed_repo, env=env, capture_output=True, text=True, timeout=600)
    if "no unfinished nightly job" in done.stderr:  # the last process finished the night itself
        with sqlite3.connect(state / "optimizer.db") as db:
            summary = json.loads(db.execute("select state_json from nightlies").fetchone()[0])
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads((tmp_path / "resumed.json").read_text())
    assert _final_state(killed_repo, state, summary) == reference
    # nothing stray: no box, lock, temporary file or proposal branch; the checkout untouched
    assert not (state / "boxes").exists() or not any((state / "boxes").iterdir())
    assert len(git(killed_repo, "worktree", "list").splitlines()) == 1
    assert not (state / "nightly.lock").exists()
    assert not [path for path in state.rglob("*") if path.name.endswith(".tmp")]
    assert optimizer_branches(killed_repo) == [summary["branch"]]
    assert snapshot(killed_repo) == before
    with sqlite3.connect(state / "optimizer.db") as db:
        assert db.execute("select status from nightlies").fetchall() == [("finished",)]


@pytest.mark.slow
def test_two_real_nightly_processes_on_one_repository(repo, tmp_path):
    import sys
    import time
    from pathlib import Path

    script_path = tmp_path / "proposals.json"
    script_path.write_text(json.dumps([after_data_line(FACT_RULE)]))
    optimizer = str(Path(sys.executable).parent / "optimizer")
    state = tmp_path / "state"
    env = _run_env(repo, state, script_path)
    first = subprocess.Popen([optimizer, "nightly", "--plain", "--max-iterations", "1"], cwd=repo, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        waited = 0.0
        while not (state / "nightly.lock").exists() and first.poll() is None and waited < 60:
            time.sleep(0.05)
            waited += 0.05
        # the first job is paused while the second starts, so it still holds the lock however long
        # the second takes to get there; a paused process is as alive as a busy one
        os.kill(first.pid, signal.SIGSTOP)
        try:
            assert (state / "nightly.lock").exists(), "the first job never took the lock"
            second = subprocess.run([optimizer, "nightly", "--plain"], cwd=repo, env=env, capture_output=True,
                                    text=True, timeout=120)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert second.returncode == 2
        assert "another job (optimizer nightly) is running on this repository" in second.stderr
        assert f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    finally:
        output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    assert "1 iteration(s), 1 accepted" in output


@pytest.mark.parametrize("text", ["-5m", "0s", "0", "abc", "", "inf", "nan"])
def test_a_time_limit_must_be_a_duration_above_zero(text):
    from optimizer.errors import InputError
    from optimizer.nightly.results import parse_duration

    with pytest.raises(InputError, match="--time-limit"):
        parse_duration(text)


def test_time_limits_are_read_in_their_unit():
    from optimizer.nightly.results import parse_duration

    assert [parse_duration(text) for text in ("90m", "8h", "3600s", "45", " 2H ", "1d")] == [
        5400, 28800, 3600, 45, 7200, 86400]


def test_a_usd_budget_needs_a_price_for_every_model_it_limits():
    from optimizer.settings.config import Settings
    from optimizer.errors import InputError
    from optimizer.ledger import Budget
    from optimizer.nightly.checks import check_budget_can_bind
    from optimizer.nightly.results import NightlyLimits

    limits = NightlyLimits(budget=Budget(usd=1.0))
    priced = Settings(agent_model="openai/gpt-4o-mini", judge_model="mock/sim", patcher_model="mock/patcher")
    check_budget_can_bind(priced, limits)  # litellm's map prices it; mock models are entered at zero
    from optimizer.ledger import Ledger

    price_in, price_out = Ledger(None).price("openai/gpt-4o-mini")  # mapped without its provider prefix
    assert 0 < price_in < price_out
    unknown = priced.model_copy(update={"agent_model": "openai/house-model-7"})
    with pytest.raises(InputError, match="agent_model openai/house-model-7"):
        check_budget_can_bind(unknown, limits)
    check_budget_can_bind(unknown.model_copy(update={"model_prices": {"openai/house-model-7": [1.0, 2.0]}}), limits)
    check_budget_can_bind(unknown, NightlyLimits(budget=Budget(tokens=1000)))  # a token budget binds anyway
    in_process = priced.model_copy(update={"agent_model": "mock/oracle@50ms", "judge_model": "local/qwen2.5-coder-1.5b"})
    check_budget_can_bind(in_process, limits)  # answered here or embedded: free, whatever litellm's map says


def test_a_proposal_is_kept_for_review_with_its_body_and_never_merged(cli, repo, isolated, tmp_path, monkeypatch):
    """The patch lifts its target and breaks template_link, on too few pairs to show it harmed:
    accepted with harm groups still open, so with `propose_open = any` its verdict is `propose`,
    and a merging night keeps it on its own branch with a pull-request body and merges nothing
    (when an open group leans toward harm: tests/optimizer/gate/test_gate.py)."""
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE, LINK_HARM))
    for name, value in {"ABLATION_TRIALS": "0", "MIN_BUCKET_PAIRS": "2", "MAX_BUCKET_PAIRS": "2",
                        "PROPOSE_OPEN": "any", "WATCH_ROUNDS": "0", "REFUSE_BEYOND_MARGIN": "false"}.items():
        monkeypatch.setenv(f"OPTIMIZER_{name}", value)
    git(repo, "stash", "-u")  # a clean checkout, as a merge needs
    main = git(repo, "rev-parse", "main")
    code, summary, output = nightly(cli, tmp_path, "--max-iterations", "1", "--merge")
    assert code == 0, output
    (row,) = summary["iterations"]
    assert (row["status"], row["verdict"]) == ("proposed", "propose"), output
    assert summary["merged"] is False and summary["accepted"] == 0
    assert git(repo, "rev-parse", "main") == main and git(repo, "rev-parse", summary["branch"]) == main
    assert LINK_HARM not in (repo / PROMPT).read_text()
    assert LINK_HARM in git(repo, "show", f"{row['review_branch']}:{PROMPT}")
    body = (repo / row["review_body"]).read_text()
    assert body.startswith(f"## Prompt patch `{row['review_branch']}`")
    assert "propose: for a reviewer" in body and "still open:" in body, body
    assert "proposed for review, not merged" in output and row["review_branch"] in output
