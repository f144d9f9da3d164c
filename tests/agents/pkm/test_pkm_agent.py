"""The PKM Agent end to end on mock models: suite table with partial credit, reminders, limits, judges."""

from __future__ import annotations

import json
import sqlite3

from optimizer.suites import load_suite
from prompt_optimizer_agents.pkm.reminders import load_history, reminders
from tests.conftest import PROJECT_ROOT
from tests.helpers import write_suite

FIXTURES = PROJECT_ROOT / "fixtures"


def test_reminders_come_from_the_workspace():
    starter = reminders(FIXTURES / "_starter_pkm" / "PKM", load_history(FIXTURES / "_starter_pkm" / ".pkm"))
    text = "\n".join(starter)
    assert "Resources/Inbox.md was edited in 3 of the last 5 runs" in text
    assert "2026-04-14 standup.md is named like a dated log" in text
    assert "lines" not in text  # no long file in the starter knowledge base
    research = "\n".join(reminders(FIXTURES / "_researcher_pkm" / "PKM", []))
    assert "Resources/Papers/reading-log.md has" in research and "Consider splitting" in research
    bilingual = "\n".join(reminders(FIXTURES / "_bilingual_pkm" / "PKM", []))
    assert "Resources/Recipes holds 6 small files" in bilingual
    assert reminders(FIXTURES / "fresh" / "PKM", []) == []


def test_pkm_suite_on_the_simulated_agent_shows_partial_credit(cli, isolated, tmp_path):
    out_json = tmp_path / "pkm.json"
    code, out, err = cli("eval", "--suite", "pkm_agent", "--agent-model", "mock/sim", "--judge-model", "mock/sim",
                         "--trials", "3", "--json", str(out_json))
    assert code == 0, out + err
    assert "pkm_agent by bucket" in out and "consolidate_fragmented" in out
    summary = json.loads(out_json.read_text())
    assert summary["totals"]["trials"] == 96 and summary["totals"]["errored"] == 0
    buckets = {row["bucket"]: row for row in summary["buckets"]}
    assert len(buckets) == 13
    # failing and passing trials both occur, and some bucket means sit strictly between 0 and 1
    assert 0 < summary["suites"][0]["mean_score"] < 1
    assert any(0 < row["mean_score"] < 1 for row in buckets.values())
    with sqlite3.connect(isolated / "optimizer.db") as db:
        routing = {score for (score,) in db.execute(
            "select score from grader_results where grader = 'pkm_routed_correctly'")}
    assert {0.0, 0.5, 1.0} <= routing  # a fragment beside the pinned file earns half credit
    judges = {row["judge"]: row for row in summary["judges"]}
    assert set(judges) == {"pkm_insight_quality", "pkm_append_coherence"}
    assert all(row["flagged"] and "not calibrated" in row["reason"] for row in judges.values())
    assert "judge pkm_insight_quality: FLAGGED" in out


def test_calibration_reports_correlation_and_later_runs_show_it(cli, isolated, tmp_path):
    out_json = tmp_path / "calibration.json"
    code, out, err = cli("judges", "calibrate", "--judge-model", "mock/sim", "--json", str(out_json))
    assert code == 0, out + err
    assert "pkm_insight_quality" in out and "pkm_append_coherence" in out and "Spearman" in out
    report = json.loads(out_json.read_text())
    for judge in report["judges"]:
        assert judge["examples"] == 20 and judge["errored"] == 0
        assert -1 <= judge["spearman"] <= 1 and 0 <= judge["agreement"] <= 1
        assert judge["flagged"] == (judge["spearman"] < 0.7)
    with sqlite3.connect(isolated / "optimizer.db") as db:
        assert db.execute("select count(*) from judge_calibrations").fetchone()[0] == 2
    code, out, err = cli("eval", "--suite", "pkm_agent", "--task", "pkm_route_running_tempo_5k",
                         "--agent-model", "mock/oracle", "--judge-model", "mock/sim")
    assert code == 0, out + err
    assert "judge pkm_insight_quality:" in out and "Spearman" in out and "not calibrated" not in out
    # an answer already stored is not asked again
    code, _, _ = cli("judges", "calibrate", "--judge-model", "mock/sim", "--fail-under", "-1")
    assert code == 0


def test_a_bad_calibration_file_is_an_input_error_naming_the_line(cli, monkeypatch, tmp_path):
    import dataclasses

    from optimizer.trials import judging

    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"id": "a", "inputs": {"note": "x"}, "label": 0.5}\n{"id": "b", "inputs": {}, "label": 3}\n')
    judge = judging.get_judge("pkm_insight_quality")
    monkeypatch.setitem(judging._registry, judge.name, dataclasses.replace(judge, calibration=bad))
    code, out, err = cli("judges", "calibrate", "--judge", "pkm_insight_quality")
    assert code == 2
    assert "labels.jsonl" in err and "line 2.label" in err


def test_a_runaway_agent_fails_with_score_zero_at_the_turn_limit_and_eval_does_not_blame_the_setup(cli, tmp_path):
    # filings outside the PARA folders: refused, never a repeat, still offered in the wrap-up
    calls = [{"name": "file_note", "arguments": {"folder": "Inbox", "file": f"draft{i}.md", "entry": "draft",
                                                 "insight": "a draft"}} for i in range(5)]
    task = {"id": "pkm_runaway", "metadata": {"failure_bucket": "loop", "max_turns": "3"},
            "input": {"content": "anything", "base_fixture": "fresh"},
            "reference_solution": {"tool_calls": calls},
            "graders": [{"name": "pkm_completion"}]}
    suite = write_suite(tmp_path / "runaway", [task], name="runaway", agent_name="pkm_agent")
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--trials", "2",
                         "--json", str(out_json))
    assert code == 0, out + err  # every trial failed: a normal run, not a broken setup
    assert "every trial errored" not in err and "setup" not in out + err
    assert "failed: runaway/pkm_runaway #0: ended: the agent used all 3 turns without finishing" in out
    assert "pass 0%  errored 0" in err  # the progress line counts them as failures
    summary = json.loads(out_json.read_text())
    assert summary["totals"]["errored"] == 0 and summary["errors"] == []
    assert summary["suites"][0]["mean_score"] == 0.0 and summary["suites"][0]["pass_at_k"] == 0.0
    assert len(summary["unfinished"]) == 2
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--fail-under", "0.5")
    assert code == 1, out + err


def test_every_simulated_trial_passes_exactly_when_the_sim_decides_it_does(cli, isolated, tmp_path):
    """The failing behaviour of each bucket really fails its task's graders, and the passing one
    passes them: so a rule that raises a bucket's pass probability raises its measured score."""
    from prompt_optimizer_agents.pkm.sim import PROFILE
    from optimizer.trials.sim import decide

    out_json = tmp_path / "pkm.json"
    code, out, err = cli("eval", "--suite", "pkm_agent", "--agent-model", "mock/sim", "--judge-model", "mock/sim",
                         "--trials", "4", "--json", str(out_json))
    assert code == 0, out + err
    seed = json.loads(out_json.read_text())["settings"]["seed"]
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    prompt = (PROJECT_ROOT / "agents/prompts/pkm_agent.md").read_text()
    tasks = {task.id: task for task in suite.tasks}
    with sqlite3.connect(isolated / "optimizer.db") as db:
        rows = db.execute("select task_id, trial_index, status from trials").fetchall()
    assert len(rows) == 128
    mismatched = [(task_id, index, status) for task_id, index, status in rows
                  if (status == "passed") != decide(PROFILE, tasks[task_id], prompt, seed, index).passed]
    assert mismatched == []
    assert {status for _, _, status in rows} == {"passed", "failed"}


def test_each_documented_rule_is_recognised_and_only_its_bucket_moves():
    from prompt_optimizer_agents.pkm import sim

    prompt = (PROJECT_ROOT / "agents/prompts/pkm_agent.md").read_text()
    examples = {}
    for line in sim.__doc__.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in sim.RULES:
            examples[cells[0]] = cells[2].strip('"')
    assert set(examples) == set(sim.RULES)
    stated_by_default = {bucket for bucket, rule in sim.RULES.items() if rule.status(prompt) == "stated"}
    assert stated_by_default == {"read_before_write", "skip_trivial"}  # the first prompt's own guidance
    for bucket, example in examples.items():
        assert sim.RULES[bucket].status(example) == "stated", bucket
        others = [other for other, rule in sim.RULES.items() if other != bucket and rule.status(example) == "stated"]
        assert others == [], (bucket, others)


def test_a_trial_ended_at_the_turn_limit_keeps_the_conversation_so_far(cli, isolated, tmp_path):
    # filings outside the PARA folders: refused, never a repeat, still offered in the wrap-up
    calls = [{"name": "file_note", "arguments": {"folder": "Inbox", "file": f"draft{i}.md", "entry": "draft",
                                                 "insight": "a draft"}} for i in range(5)]
    task = {"id": "pkm_runaway", "metadata": {"failure_bucket": "loop", "max_turns": "2"},
            "input": {"content": "anything", "base_fixture": "fresh"},
            "reference_solution": {"tool_calls": calls}, "graders": [{"name": "pkm_completion"}]}
    suite = write_suite(tmp_path / "runaway", [task], name="runaway", agent_name="pkm_agent")
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle")
    assert code == 0, out + err
    with sqlite3.connect(isolated / "optimizer.db") as db:
        status, score, error, transcript = db.execute(
            "select status, score, error, transcript_json from trials").fetchone()
    assert (status, score, error) == ("failed", 0.0, "ended: the agent used all 2 turns without finishing")
    transcript = json.loads(transcript)
    assert [call["name"] for call in transcript["tool_calls"]] == ["keep_note", "file_note"], \
        "the oracle keeps the note first, as the agent asks"
    assert transcript["usage"]["calls"] == 2


def test_a_worked_example_shows_the_one_file_note_call_and_that_call_files_the_note_where_the_task_expects(
        cli, tmp_path):
    """A PKM example shows the calls the prompt asks for: `keep_note`, then one `file_note` made
    from the reference's edit or new file (entry without the marker, which the tool adds);
    replayed on the task's own knowledge base it passes the task's routing, completion and marker
    graders. A skip keeps its reference calls; a reorganisation keeps them after `keep_note`."""
    from optimizer.registry import get_agent

    entry = get_agent("pkm_agent")
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    kept = {"pkm_completion", "pkm_routed_correctly", "pkm_fact_id_preserved", "pkm_no_overwrite"}
    replayed, as_written = [], set()
    for task in suite.tasks:
        calls = entry.demonstrate(task)
        reference = list(task.reference_solution.tool_calls)
        if reference[0].name == "skip_pkm_organization":
            assert calls == reference
        else:
            assert calls[0].name == "keep_note" and task.input.content.split()[0] in calls[0].arguments["topic"]
        if [call.name for call in calls] != ["keep_note", "file_note"]:
            assert calls == entry.replay(task, reference)
            as_written.add(task.bucket)
            continue
        calls = calls[1:]
        arguments = calls[0].arguments
        assert "fact_id" not in arguments["entry"] and arguments["insight"].strip()
        edits = any(call.name == "Edit" for call in reference)
        data = json.loads(task.model_dump_json(exclude_none=True))
        data["reference_solution"]["tool_calls"] = [calls[0].model_dump()] * (2 if edits else 1)
        data["graders"] = [grader for grader in data["graders"] if grader["name"] in kept]
        replayed.append(data)
    assert {"skip_trivial", "consolidate_fragmented", "archive_finished_project"} <= as_written
    assert len(replayed) >= 15
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", str(write_suite(tmp_path / "shown", replayed, name="shown",
                                                            agent_name="pkm_agent")),
                         "--agent-model", "mock/oracle", "--json", str(out_json))
    assert code == 0, out + err
    totals = json.loads(out_json.read_text())["totals"]
    assert totals["passed"] == totals["trials"] == len(replayed), out
