"""`optimizer run` and `optimizer review` end to end, in a temporary git repository, on mock/sim
with scripted proposals from mock/patcher (through dspy and litellm, like a real patcher)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import (DATA_LINE, FACT_RULE, LINK_HARM, PROMPT, after_data_line, git, optimizer_branches,
                           script, snapshot)


def test_a_general_rule_for_the_failing_bucket_is_accepted(cli, repo, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    before = snapshot(repo)
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "accepted", (summary, err[-3000:])
    assert "targets: card_agent/fact_preservation" in err.replace("\n", " ")
    branches = optimizer_branches(repo)
    assert len(branches) == 1
    base = before["commit"].strip()
    assert git(repo, "diff", "--name-only", f"{base}..{branches[0]}").split() == [PROMPT]
    assert FACT_RULE in git(repo, "diff", f"{base}..{branches[0]}")
    message = git(repo, "log", "-1", "--format=%B", branches[0])
    assert "Gate (strict, full): accepted" in message and "* card_agent/fact_preservation" in message
    assert snapshot(repo) == before, "the user's checkout changed"
    assert git(repo, "worktree", "list").count("\n") == 1

    code, out, err = cli("review")
    assert code == 0, out + err
    assert FACT_RULE in out
    row = next(line for line in out.splitlines() if "* card_agent/fact_preservation" in line)
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert float(cells[3]) > float(cells[2]), row  # after > before
    assert "pass improvement" in out and "request:" in out

    code, out, err = cli("review", "--merge")
    assert code == 0 and f"merged {branches[0]} into main" in out, out + err
    assert FACT_RULE in (repo / PROMPT).read_text()
    code, out, err = cli("review", "--merge")  # a second merge has nothing to do, and says so
    assert code == 0 and f"already merged: {branches[0]} into main" in out, out + err


def test_targets_are_compared_on_fresh_pairs_in_batches_and_the_rest_on_the_baselines(cli, repo, tmp_path,
                                                                                        monkeypatch):
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    text = err.replace("\n", " ")
    # fact_preservation has two train tasks: 8 fresh pairs per batch, 4 per task
    assert "targets: 8 fresh pairs (base prompt and candidate) of card_agent/fact_preservation" in text
    assert "rest: " in text and "harm check" in text
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] == "accepted" and proposal["batches"] >= 2
    decision = json.loads((Path(summary["request"]).parent / "decision-1.json").read_text())
    target = next(b for b in decision["buckets"] if b["targeted"])
    assert target["pairs"] % 8 == 0 and target["verdict"] == "improved"
    assert decision["rollouts"] <= 250
    store = open_store(load_settings(repo), repo)
    candidate = store.trials.load(store.proposals.rows()[-1]["candidate_run_id"])
    fresh = {t.index for t in candidate if t.bucket == "fact_preservation" and t.split == "train"}
    assert min(fresh) >= 4, "targets are never judged on the baseline trials that chose them"
    message = git(repo, "log", "-1", "--format=%B", optimizer_branches(repo)[0])
    assert "Gate (strict, full): accepted" in message and "batch(es) of pairs" in message


def test_run_and_noise_decide_through_the_same_comparison(cli, repo, tmp_path, monkeypatch):
    from optimizer.comparison import compare as comparison
    from optimizer.loop import candidate as loop
    from optimizer.loop import noise

    calls = []
    real = comparison.compare

    def counted(*args, **kwargs):
        calls.append(kwargs["policy"])
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "compare", counted)
    monkeypatch.setattr(noise, "compare", counted)
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    assert cli("run")[0] == 0
    code, out, err = cli("noise", "--repeats", "1")
    assert code == 0, out + err
    assert len(calls) >= 2 and len(set(calls)) == 1  # one procedure, one policy from the same settings
    assert "false accepts (A/A): " in out and "power (the sim's rule for the target): " in out


def test_a_patch_that_harms_another_bucket_is_rejected_naming_it(cli, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_ABLATION_TRIALS", "0")  # the gate's harm test, not the ablation before it
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE, LINK_HARM))
    before = snapshot(repo)
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    proposal = json.loads((tmp_path / "run.json").read_text())["proposals"][0]
    assert proposal["status"] == "rejected_gate"
    assert "no_harm" in proposal["reason"] and "card_agent/template_link fell" in proposal["reason"]
    assert "fact_preservation" not in proposal["reason"].split("no_harm")[1].split(";")[0]
    # the patch names `link`, which moves nothing: every harm group, the pooled one too, is tested at
    # m / alpha_harm (name weighting is off by default)
    report = Path(json.loads((tmp_path / "run.json").read_text())["report"])
    decision = json.loads((report.parent / "decision-1.json").read_text())
    thresholds = next(r for r in decision["rules"] if r["rule"] == "no_harm")["numbers"]["evalue_thresholds"]
    assert "non-target (pooled)" in thresholds
    assert all(value == pytest.approx(len(thresholds) / 0.1) for value in thresholds.values())
    assert optimizer_branches(repo) == [], "a rejected branch must be deleted"
    assert snapshot(repo) == before

    code, out, err = cli("review", proposal["branch"])
    assert code == 0, out + err
    assert "branch deleted" in out and LINK_HARM in out


def test_a_second_iteration_on_the_same_base_reuses_its_fresh_base_prompt_trials(cli, repo, tmp_path, monkeypatch):
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    monkeypatch.setenv("OPTIMIZER_ABLATION_TRIALS", "0")  # two gated proposals, each rejected by the gate
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE, LINK_HARM), after_data_line(LINK_HARM, FACT_RULE))
    first = cli("run", "--json", str(tmp_path / "first.json"))
    second = cli("run", "--json", str(tmp_path / "second.json"))
    assert first[0] == 0 and second[0] == 0, first[1:] + second[1:]
    assert "trials at fresh indexes that earlier iterations ran on this base are reused" not in first[2]
    assert "trials at fresh indexes that earlier iterations ran on this base are reused" in second[2].replace("\n", " ")
    store = open_store(load_settings(repo), repo)
    confirm = [row for row in store.runs.rows() if row["kind"] == "confirm"]
    assert len(confirm) == 1, "the second iteration ran no base-prompt trial the first had run"
    decisions = [json.loads((tmp_path / name).read_text())["proposals"][0] for name in ("first.json", "second.json")]
    assert [d["status"] for d in decisions] == ["rejected_gate", "rejected_gate"]
    assert decisions[1]["rollouts"] < decisions[0]["rollouts"]


def test_a_patch_the_gate_already_rejected_at_this_base_is_not_judged_again(cli, repo, tmp_path, monkeypatch):
    """A proposer with one worked example to show proposes it every time: judged again, the same
    patch would spend a share of the night's error budget on a known answer. It is refused before
    any rollout, naming the earlier proposal; a different patch is still judged."""
    monkeypatch.setenv("OPTIMIZER_ABLATION_TRIALS", "0")
    monkeypatch.setenv("OPTIMIZER_BUCKET_PATIENCE", "5")
    same = after_data_line(FACT_RULE, LINK_HARM)
    script(tmp_path, monkeypatch, same, same, after_data_line(LINK_HARM, FACT_RULE))
    runs = [cli("run", "--json", str(tmp_path / f"{n}.json")) for n in range(3)]
    assert all(code == 0 for code, _, _ in runs), runs
    first, again, other = (json.loads((tmp_path / f"{n}.json").read_text())["proposals"][0] for n in range(3))
    assert first["status"] == "rejected_gate"
    assert again["status"] == "rejected_check" and again["rollouts"] == 0
    assert again["reason"].endswith(f"already judged: the same patch as proposal {first['ordinal']}, rejected at "
                                    f"this base"), again["reason"]
    assert other["status"] == "rejected_gate" and other["rollouts"] > 0


def test_a_regression_suite_is_tested_for_harm_with_the_buckets(cli, repo, tmp_path, monkeypatch):
    task = json.loads((repo / "suites/card_agent/tasks/card_link_recipe_bookmark.json").read_text()
                      if (repo / "suites/card_agent/tasks/card_link_recipe_bookmark.json").exists() else
                      next((repo / "suites/card_agent").rglob("card_link_recipe_bookmark.json")).read_text())
    task["id"] = "regression_link_recipe"  # passes all four baseline trials under seed 0
    regression = repo / "regression_suite"
    (regression / "tasks").mkdir(parents=True)
    (regression / "suite.json").write_text(json.dumps({"name": "card_regression", "agent_name": "card_agent",
                                                       "kind": "regression"}))
    (regression / "tasks" / "regression_link_recipe.json").write_text(json.dumps(task))
    git(repo, "add", "regression_suite")
    git(repo, "commit", "-qm", "regression suite")
    monkeypatch.setenv("OPTIMIZER_ABLATION_TRIALS", "0")  # the gate's harm test, not the ablation before it
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE, LINK_HARM))
    code, out, err = cli("run", "--suite", "card_agent", "--suite", str(regression),
                         "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    proposal = json.loads((tmp_path / "run.json").read_text())["proposals"][0]
    assert proposal["status"] == "rejected_gate"
    assert "no_harm: " in proposal["reason"]
    summary = json.loads((tmp_path / "run.json").read_text())
    decision = json.loads((Path(summary["request"]).parent / "decision-1.json").read_text())
    row = next(b for b in decision["buckets"] if b["kind"] == "regression")
    assert row["suite"] == "card_regression" and row["change"] < 0  # tested for harm like any bucket


@pytest.mark.parametrize("added, offending", [
    ("- Keep strings such as 10:30 and zoom exactly as they appear.", "graded substring '10:30'"),
    ("- Notes like 'weighed the sourdough starter' are metrics.", "eval input words"),
    ("- card_event_standup_zoom shows the event rule.", "task id 'card_event_standup_zoom'"),
])
def test_hard_coded_patches_are_rejected_before_any_rollout(cli, repo, tmp_path, monkeypatch, added, offending):
    script(tmp_path, monkeypatch, after_data_line(added))
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] == "rejected_check"
    assert proposal["reason"].startswith("hard_coding:") and offending in proposal["reason"]
    assert proposal["rollouts"] == 0
    assert summary["rollouts"] == 100, "only the baseline ran"
    assert optimizer_branches(repo) == []


def test_a_hard_coded_patch_is_sent_back_once_and_the_corrected_one_goes_on(cli, repo, tmp_path, monkeypatch):
    """The proposer runs the pre-rollout checks on its own answer and gives the reason back to
    the patcher before its last attempt; both answers are in the proposal log."""
    first = after_data_line("- Keep strings such as 10:30 and zoom exactly as they appear.")
    script(tmp_path, monkeypatch, {**first, "after_feedback": after_data_line(FACT_RULE)})
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] == "accepted", proposal
    log = (Path(summary["report"]).parent / "proposal-1.log").read_text()
    assert "## Attempt 1: sent back: hard_coding: the patch copies evaluation data: graded substring '10:30'" in log
    assert "## Attempt 2: applied" in log
    assert "zoom" not in git(repo, "show", f"{optimizer_branches(repo)[0]}:{PROMPT}").lower()


@pytest.mark.parametrize("lines", [True, False])
def test_a_rule_answer_with_several_rules_is_sent_back_for_one(cli, repo, tmp_path, monkeypatch, lines):
    rule = FACT_RULE.removeprefix("- ")
    several = ("\n" if lines else " ").join([rule, "Use event for meetings.", "Always add tags.", "Use link for pages."])
    script(tmp_path, monkeypatch, {"rationale": "Facts were lost.", "rule": several,
                                   "after_feedback": {"rationale": "Facts were lost.", "rule": rule}})
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "rule")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["proposals"][0]["status"] == "accepted", summary["proposals"][0]
    log = (Path(summary["report"]).parent / "proposal-1.log").read_text()
    assert f"## Attempt 1: sent back: the answer gives {4 if lines else 1} line(s) and 4 sentences" in log
    patched = git(repo, "show", f"{optimizer_branches(repo)[0]}:{PROMPT}")
    assert patched.endswith(f"\n\n{rule}\n") and "Always add tags." not in patched


def test_a_command_proposer_touching_another_file_is_rejected(cli, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")
    monkeypatch.setenv("OPTIMIZER_PROPOSER_COMMAND",
                       f"printf '%s\\n' {json.dumps(FACT_RULE)} >> {PROMPT} && echo changed >> notes.txt "
                       "&& test -f {request}")
    before = snapshot(repo)
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    proposal = json.loads((tmp_path / "run.json").read_text())["proposals"][0]
    assert proposal["status"] == "rejected_check"
    assert proposal["reason"] == f"files: only {PROMPT} may change; the patch also changes notes.txt"
    assert snapshot(repo) == before


def test_the_command_proposer_patch_is_its_git_diff(cli, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")
    monkeypatch.setenv("OPTIMIZER_PROPOSER_COMMAND",
                       f"grep -q 'Raw Input ID' {{request}} && printf '%s\\n' {json.dumps(FACT_RULE)} >> {{workdir}}/{PROMPT}")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "accepted", (summary, err[-3000:])


def test_the_checkout_is_untouched_after_a_crash_mid_iteration(repo, tmp_path, monkeypatch):
    from optimizer.loop import candidate
    from optimizer.loop import iteration as loop
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    before = snapshot(repo)
    settings = load_settings(repo)

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash while gating")

    monkeypatch.setattr(candidate, "compare", crash)
    store = open_store(settings, repo)
    with pytest.raises(RuntimeError, match="simulated crash"):
        loop.run_iteration(loop.LoopContext(settings=settings.parts, project_root=repo, store=store, log=lambda m: None))
    assert snapshot(repo) == before
    assert optimizer_branches(repo) == []
    assert git(repo, "worktree", "list").count("\n") == 1
    assert store.iterations.rows()[-1]["status"] == "crashed"


def test_dry_run_writes_a_request_without_holdout_tasks(cli, repo, tmp_path, monkeypatch):
    code, out, err = cli("run", "--dry-run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "dry_run" and summary["proposals"] == []
    request = Path(summary["request"]).read_text()
    assert "card_fact_flight_details" in request and "LH 1234" in request  # a failing train task
    assert "raw_yaml:\nfact_id: " in request and "ui_configs:\n- template_id: " in request  # the card as saved
    assert '"raw_yaml"' not in request
    holdout = [json.loads(path.read_text())["id"] for path in (repo / "suites/card_agent").rglob("*.json")
               if path.name != "suite.json" and json.loads(path.read_text())["metadata"].get("split") == "holdout"]
    assert holdout and not [task for task in holdout if task in request]
    assert "Edit only `agents/prompts/card_agent.md`" in request
    assert "## Prompt manual" in request and "Never write to the test" in request
    assert optimizer_branches(repo) == []
    import os
    import sqlite3
    with sqlite3.connect(Path(os.environ["OPTIMIZER_STATE_DIR"]) / "optimizer.db") as db:
        status, stored = db.execute("select status, summary_json from iterations").fetchone()
    assert status == "dry_run" and json.loads(stored)["status"] == "dry_run"  # the record says what ended it


def test_the_baseline_runs_a_task_alone_in_its_bucket_lone_task_factor_times(cli, repo, tmp_path, monkeypatch):
    from collections import Counter

    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    monkeypatch.setenv("OPTIMIZER_LONE_TASK_FACTOR", "3")
    code, out, err = cli("run", "--dry-run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    store = open_store(load_settings(repo), repo)
    counts = Counter(trial.task_id for trial in store.trials.load(summary["baseline_run_id"]))
    assert counts["card_trivial_single_emoji"] == 12  # trivial_input has one train task
    assert counts["card_fact_flight_details"] == 4 and counts["card_multi_fact_call_mom"] == 4  # two; holdout


def test_refuses_to_start_when_the_base_commit_lacks_the_prompt(cli, repo, tmp_path, monkeypatch):
    git(repo, "rm", "-q", "--cached", PROMPT)
    git(repo, "commit", "-qm", "untrack the prompt")
    code, out, err = cli("run", "--dry-run")
    assert code == 2
    assert f"does not contain {PROMPT}" in err and "commit the prompt file" in err


def test_the_rule_patch_format_appends_one_rule_and_goes_through_the_same_gate(cli, repo, tmp_path, monkeypatch):
    rule = FACT_RULE.removeprefix("- ")
    script(tmp_path, monkeypatch, {"rationale": "Facts were paraphrased away.", "rule": rule})
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "rule")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "accepted", (summary, err[-3000:])
    branch = optimizer_branches(repo)[0]
    patched = git(repo, "show", f"{branch}:{PROMPT}")
    assert patched.endswith(f"\n\n{rule}\n") and patched.startswith((repo / PROMPT).read_text().rstrip("\n"))


def test_the_embedded_patcher_adds_worked_examples_else_writes_a_contrast_rule_and_others_edit():
    from optimizer.settings.config import Settings
    from optimizer.proposal.proposers import asked_format, patch_format

    assert patch_format(Settings(patcher_model="local/qwen2.5-coder-1.5b").proposal) == "example"
    assert asked_format(Settings(patcher_model="local/qwen2.5-coder-1.5b").proposal) == "contrast"
    assert asked_format(Settings(patcher_model="openai/gpt-4.1", patch_format="example").proposal) == "edits"
    assert patch_format(Settings(patcher_model="openai/gpt-4.1").proposal) == "edits"
    assert patch_format(Settings(patcher_model="local/qwen2.5-coder-1.5b", patch_format="edits").proposal) == "edits"


def test_edits_that_do_not_apply_are_kept_in_the_proposal_log(cli, repo, tmp_path, monkeypatch):
    """Both answers (the first and the one after the feedback) are recorded word for word, since
    a `no_patch` leaves no diff to read."""
    script(tmp_path, monkeypatch, {"rationale": "Quote a line that is not there.",
                                   "edits": [{"search": "A line the prompt does not have.",
                                              "replace": "Keep every number."}]})
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["proposals"][0]["status"] == "no_patch"
    run_dir = Path(summary["report"]).parent
    log = (run_dir / "proposal-1.log").read_text()
    assert log.count("search:\n```\nA line the prompt does not have.\n```") == 2
    assert log.count("replace:\n```\nKeep every number.\n```") == 2
    assert "## Attempt 2: edit 1: the search text was not found" in log
    assert "proposal-1.log" in Path(summary["report"]).read_text()


def test_mock_patcher_without_a_script_is_a_configuration_error(cli, repo):
    code, out, err = cli("run")
    assert code == 2
    assert "mock_patcher_script" in err


@pytest.mark.slow
def test_the_gate_false_accept_rate_on_mock_sim_is_at_most_five_percent(repo, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_SIM_NOISE", "independent")
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store
    from optimizer.loop.iteration import LoopContext
    from optimizer.loop.noise import measure_noise

    settings = load_settings(repo)
    result = measure_noise(LoopContext(settings=settings.parts, project_root=repo, store=open_store(settings, repo),
                                       log=lambda m: None), repeats=20, cases=("A/A",))
    aa = result.cases["A/A"]
    assert aa.decisions == 20 - result.skipped >= 18
    assert aa.rate <= 0.05


def test_a_patch_stopped_by_the_checks_is_not_quoted_in_the_next_request(cli, repo, tmp_path, monkeypatch):
    hard_coded = after_data_line("- Keep strings such as 10:30 and zoom exactly as they appear.")
    script(tmp_path, monkeypatch, hard_coded, hard_coded)
    requests = []
    for number in range(2):
        code, out, err = cli("run", "--json", str(tmp_path / f"run{number}.json"))
        assert code == 0, out + err
        summary = json.loads((tmp_path / f"run{number}.json").read_text())
        assert summary["proposals"][0]["status"] == "rejected_check"
        requests.append(Path(summary["request"]).read_text())
    assert "Already tried" not in requests[1] and "10:30 and zoom" not in requests[1]


def test_rejected_ideas_are_remembered_and_an_exhausted_bucket_is_set_aside(cli, repo, tmp_path, monkeypatch):
    irrelevant = {"rationale": "Try a title rule.", "edits": [
        {"search": DATA_LINE, "replace": DATA_LINE + "\n- Write titles in sentence case, under sixty characters."}]}
    script(tmp_path, monkeypatch, irrelevant, irrelevant, irrelevant)
    targets, requests = [], []
    for number in range(3):
        code, out, err = cli("run", "--json", str(tmp_path / f"run{number}.json"))
        assert code == 0, out + err
        summary = json.loads((tmp_path / f"run{number}.json").read_text())
        assert summary["status"] == "rejected"
        request = Path(summary["request"]).read_text()
        requests.append(request)
        targets.append(request.split("## Targeted buckets\n")[1].split("\n")[0])
    assert "fact_preservation" in targets[0] and targets[1] == targets[0]
    assert "Already tried" not in requests[0]
    memory = requests[1].split("Already tried for these buckets")[1].split("## Failures")[0]
    assert "sentence case" in memory and "Outcome:" in memory
    # two rejections at this base commit: the third iteration works on another bucket
    assert "fact_preservation" not in targets[2]
    assert "not targeted (2+ rejected proposals, or searches that promoted none, at this base): " \
           "card_agent/fact_preservation" in err.replace("\n", " ")


@pytest.mark.parametrize("text, says", [('[{"rationale": 5, "edits": "x"}', "not valid JSON"),
                                        ('{"not": "a list"}', "must be a list of proposals"),
                                        ('[{"rationale": "r", "edits": "x"}]', "[0].edits"),
                                        ('[{"rationale": "r", "edit": []}]', "unknown key(s) edit"),
                                        ("[" * 200_000 + "]" * 200_000, "nested too deep")])
def test_a_broken_mock_patcher_script_is_refused_before_the_baseline(cli, repo, tmp_path, monkeypatch, text, says):
    path = tmp_path / "script.json"
    path.write_text(text)
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SCRIPT", str(path))
    code, out, err = cli("run")
    assert code == 2, out + err
    assert "script.json" in err and says in err
    assert "trials" not in out  # no baseline was run


def test_an_agent_without_a_suite_in_the_run_is_refused(cli, repo):
    code, out, err = cli("run", "--dry-run", "--agent", "nope")
    assert code == 2
    assert "field '--agent'" in err and "agents here: card_agent" in err


def test_a_branch_that_cannot_be_deleted_is_left_with_a_warning(repo, tmp_path, caplog):
    import git as gitpython

    from optimizer import gitops

    git(repo, "branch", "optimizer/held")
    git(repo, "worktree", "add", "-q", str(tmp_path / "held"), "optimizer/held")  # a checked-out branch stays
    with caplog.at_level("WARNING", logger="optimizer"):
        gitops.delete_branch(gitpython.Repo(repo), "optimizer/held")
        gitops.delete_branch(gitpython.Repo(repo), "optimizer/never-made")  # nothing to delete: no warning
    assert git(repo, "branch", "--list", "optimizer/held").strip(" +*\n") == "optimizer/held"
    assert [record.getMessage().split(":")[0] for record in caplog.records] == [
        "could not delete branch optimizer/held"]


def test_an_unusable_patcher_reply_is_recorded_in_one_line(cli, repo, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, {"raw": "Sure! Here is my improved prompt:\n\nBe better."})
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    proposal = json.loads((tmp_path / "run.json").read_text())["proposals"][0]
    assert proposal["status"] == "no_patch"
    assert proposal["reason"].startswith("the patcher gave no usable answer: ")
    assert "\n" not in proposal["reason"] and "Traceback" not in proposal["reason"]


def test_the_uncommitted_prompt_note_compares_with_the_checkout_not_the_base(cli, repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / PROMPT).write_text((repo / PROMPT).read_text() + "\n- A committed rule.\n")
    git(repo, "commit", "-qam", "a rule")
    code, out, err = cli("run", "--dry-run", "--base", base)  # the base's prompt differs, the checkout is clean
    assert code == 0, out + err
    assert "uncommitted changes" not in out + err
    (repo / PROMPT).write_text((repo / PROMPT).read_text() + "- Not committed yet.\n")
    code, out, err = cli("run", "--dry-run")
    assert code == 0, out + err
    assert f"note: {PROMPT} has uncommitted changes" in out + err


def test_a_mock_patcher_script_that_does_not_exist_is_named(cli, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SCRIPT", str(tmp_path / "nowhere.json"))
    code, out, err = cli("run")
    assert code == 2, out + err
    assert "nowhere.json" in err and "field 'mock_patcher_script'" in err and "does not exist" in err


def test_every_run_of_an_iteration_ends_completed_with_a_summary_of_all_its_trials(cli, repo, tmp_path, monkeypatch):
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, out, err = cli("run")
    assert code == 0, out + err
    store = open_store(load_settings(repo), repo)
    runs = store.runs.frame()
    assert set(runs["kind"]) >= {"baseline", "confirm", "candidate"}
    for run_id in runs["run_id"]:
        record = store.runs.get(run_id)
        assert record["status"] == "completed", (record["kind"], record["status"])
        assert record["summary"]["totals"]["trials"] == len(store.trials.load(run_id)), record["kind"]


def test_an_agent_that_passes_every_train_trial_ends_the_iteration_with_nothing_to_fix(cli, repo, tmp_path,
                                                                                         monkeypatch):
    """mock/oracle replays every reference solution: no bucket fails, so no request is written."""
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, out, err = cli("run", "--agent-model", "mock/oracle", "--judge-model", "mock/oracle",
                         "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "nothing_to_fix"
    assert "no train trial failed: nothing to fix" in err
    import os
    import sqlite3
    with sqlite3.connect(Path(os.environ["OPTIMIZER_STATE_DIR"]) / "optimizer.db") as db:
        (stored,) = db.execute("select summary_json from iterations").fetchone()
    assert json.loads(stored)["status"] == "nothing_to_fix"


def test_the_example_patch_format_shows_a_targets_note_and_the_gate_leaves_that_task_out(cli, repo, tmp_path,
                                                                                          monkeypatch):
    """A worked example of the target bucket from a reference solution, beside its companions from
    other buckets: the proposal adds them at the end of the prompt, the lint lets the shown notes
    through, and the gate pairs only the buckets' other tasks (a shown one never counts, on either
    side)."""
    import os
    import sqlite3

    from optimizer.proposal.examples import COMPANIONS

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))  # for a target with no example (none here)
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "example")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] in ("accepted", "rejected_gate"), (proposal, err[-3000:])
    decision = json.loads((Path(summary["report"]).parent / "decision-1.json").read_text())
    assert len(decision["shown_tasks"]) == 1 + COMPANIONS
    shown = [name.split("/")[1] for name in decision["shown_tasks"]]
    assert "their input shown in the prompt as a worked example" in err
    with sqlite3.connect(Path(os.environ["OPTIMIZER_STATE_DIR"]) / "optimizer.db") as db:
        proposer, rationale, diff, run_id = db.execute(
            "select proposer, rationale, diff, candidate_run_id from proposals").fetchone()
        candidate_tasks = {row[0] for row in db.execute("select task_id from trials where run_id = ?", (run_id,))}
    assert proposer == "example" and "worked example" in rationale
    added = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    for task_id in shown:
        task = json.loads(next((repo / "suites/card_agent/tasks").rglob(f"{task_id}.json")).read_text())
        assert task["input"]["content"] in added, task_id
    assert added.count("## Example") == 1 + COMPANIONS
    assert candidate_tasks and not set(shown) & candidate_tasks
    assert "Not paired (their input is shown in the prompt as a worked example)" in \
        Path(summary["report"]).read_text()


def test_the_example_patch_format_targets_the_worst_bucket_an_example_can_address(cli, repo, tmp_path,
                                                                                   monkeypatch):
    """A bucket with no worked example to show would get a small patcher's rule, which carries
    over to new notes far less often: in the `example` format the targeting passes it over for
    the next failing bucket that has one, and keeps it only when no failing bucket has one."""
    import re

    from optimizer.loop import candidate

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "example")
    real = candidate.choose_examples

    def targeted(*flags: str) -> tuple[str, str]:
        code, out, err = cli("run", "--dry-run", *flags)
        assert code == 0, out + err
        return re.search(r"^targets: (\S+) ", err, re.M).group(1), err

    first, _ = targeted()
    monkeypatch.setattr(candidate, "choose_examples", lambda suites, targets, *rest:
                        [] if ("card_agent", first.split("/")[1]) in targets else real(suites, targets, *rest))
    second, err = targeted()
    assert second != first and second.startswith("card_agent/")
    passed_over = re.search(r"^no worked example or shown answer left for (.+); targeting (\S+) instead$", err, re.M)
    assert passed_over and first in passed_over.group(1).split(", ") and passed_over.group(2) == second, err

    monkeypatch.setattr(candidate, "choose_examples", lambda *args: [])
    assert targeted()[0] == first, "with no example anywhere the worst bucket stays the target (it gets a rule)"


def test_a_target_whose_search_pool_ended_with_nothing_new_is_passed_over(cli, repo, monkeypatch):
    """A search that ended because its candidates stopped changing (the `example` format once its
    examples were tried) ends at once when run again on the same pool: an iteration rejected
    without a proposal, spending the night's patience. The targeting passes those targets over
    for the next failing bucket, and says so; without a search the pool does not matter."""
    import re

    from optimizer.proposal.pool import Candidate, pool_folder, save_records

    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "example")

    def targeted(*flags: str) -> tuple[str, str]:
        code, out, err = cli("run", "--dry-run", *flags)
        assert code == 0, out + err
        return re.search(r"^targets: (\S+) ", err, re.M).group(1), err

    first, err = targeted("--search-rollouts", "24")
    suite, bucket = first.split("/")
    state_dir = Path(re.search(r"^request: (\S+)$", err, re.M).group(1)).parents[2]
    prompt = (repo / "agents/prompts/card_agent.md").read_text(encoding="utf-8")
    folder = pool_folder(state_dir / "search", "card_agent", prompt, {(suite, bucket)})
    records = [Candidate(number=1, sha="a1", parent="b0", status="screened_out")]
    save_records(folder, records)
    assert targeted("--search-rollouts", "24")[0] == first, "a pool still offering new candidates is continued"
    records += [Candidate(number=n, sha="a1", parent="b0", status="unchanged") for n in (2, 3)]
    save_records(folder, records)
    second, err = targeted("--search-rollouts", "24")
    assert second != first and second.startswith("card_agent/"), err
    assert (f"not targeted (the search pool at this base ended with nothing new to screen, 3 candidate(s)): "
            f"{first}") in err
    assert targeted()[0] == first


def test_a_worked_example_the_gate_rejected_is_not_offered_again_at_this_base(cli, repo, tmp_path, monkeypatch):
    """Each iteration starts from its first prepared patch: without knowing which ones the gate
    already rejected at this base, the next iteration on the bucket would make the same one,
    refused before the gate as already judged. It gets the bucket's next example instead."""
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "example")
    monkeypatch.setenv("OPTIMIZER_ABLATION_TRIALS", "0")
    monkeypatch.setenv("OPTIMIZER_BUCKET_PATIENCE", "5")
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))  # for a target with no example left
    import os
    import sqlite3

    runs = [cli("run") for _ in range(2)]
    assert all(code == 0 for code, _, _ in runs), runs
    with sqlite3.connect(Path(os.environ["OPTIMIZER_STATE_DIR"]) / "optimizer.db") as db:
        first, second = db.execute("select status, rationale, reason from proposals order by id").fetchall()
    assert first[0] == "rejected_gate" and first[1].startswith("worked example"), first
    assert second[0] != "rejected_check" and second[1].startswith("worked example"), second
    assert second[1] != first[1]
