"""PKM graders on outcomes made by scripted tool calls against a small knowledge base."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from prompt_optimizer_agents.pkm.sandbox import Sandbox
from prompt_optimizer_agents.pkm.state import build_state, snapshot
from prompt_optimizer_agents.pkm.tools import PKMTools
from optimizer import Outcome, Task, Trial
from optimizer.trials.judging import JudgeSettings, judging
from optimizer.registry import get_grader

FACT_ID = "2026/05/25.md#ts_1"
RUNNING = ("# Running\n\nBuilding base for the October half marathon.\n\n"
           "- 2026-03-02 easy 5 km, knee fine <!-- fact_id: fact_pkm_running_001 -->\n"
           "- 2026-03-09 long run 12 km at 6:10 <!-- fact_id: fact_pkm_running_002 -->\n")
NEW_LINE = "- 2026-05-25 8 km at 5:40, knee ok <!-- fact_id: 2026/05/25.md#ts_1 -->\n"
APPEND = {"path": "Areas/Health/running.md", "old_string": RUNNING.splitlines(keepends=True)[-1],
          "new_string": RUNNING.splitlines(keepends=True)[-1] + NEW_LINE}
INSIGHT = {"fact_id": FACT_ID, "insight_text": "At 5:40 pace this run beats the 6:10 long run from March, "
                                               "so the half marathon base is building and the knee held."}


def outcome(tmp_path: Path, calls: list[tuple[str, dict]]) -> Trial:
    pkm = tmp_path / "PKM"
    (pkm / "Areas" / "Health").mkdir(parents=True)
    (pkm / "Areas" / "Health" / "running.md").write_text(RUNNING, encoding="utf-8")
    (pkm / "Projects" / "Kitchen").mkdir(parents=True)
    (pkm / "Projects" / "Kitchen" / "plan.md").write_text(
        "# Kitchen\n- order tiles <!-- fact_id: fact_pkm_kitchen_001 -->\n", encoding="utf-8")
    before = snapshot(pkm)
    tools = PKMTools(Sandbox(pkm), FACT_ID)
    by_name = {tool.name: tool for tool in tools.tools()}
    for name, arguments in calls:
        result = by_name[name].handler(arguments)
        assert not result.is_error, result.text
    state = build_state(fact_id=FACT_ID, before=before, after=snapshot(pkm), events=tools.events,
                        insight=tools.insight.__dict__ if tools.insight else None,
                        skip_evidence=tools.skip_evidence, reminders=[])
    return Trial(suite="pkm", task_id="t", bucket="b", split="train", index=0, status="failed",
                 outcome=Outcome(environment_state=state))


def grade(name: str, trial: Trial, config: dict | None = None, content: str = "ran 8k, 5:40 pace, knee ok"):
    entry = get_grader(name)
    task = Task.model_validate({"id": "t", "input": {"content": content, "fact_id": FACT_ID},
                                "graders": [{"name": name, "config": config or {}}]})
    with judging(JudgeSettings(model="mock/sim", retry_attempts=1)):
        return entry.func(task, trial, entry.parse_config(config or {}, path=None, where="graders[0]"))


FILED = [("Read", {"path": "Areas/Health/running.md"}), ("Edit", APPEND), ("update_timeline_card_insight", INSIGHT)]
SKIPPED = [("skip_pkm_organization", {"evidence": "a greeting with nothing to keep"})]


def test_a_well_filed_note_passes_every_grader(tmp_path):
    trial = outcome(tmp_path, FILED)
    routing = {"expected_buckets": ["Areas/Health"], "expected_files": ["Areas/Health/running.md"]}
    for name, config in [("pkm_completion", {"expect": "persist"}), ("pkm_routed_correctly", routing),
                         ("pkm_read_before_write", None), ("pkm_no_overwrite", None), ("pkm_fact_id_preserved", None),
                         ("pkm_insight_quality", None), ("pkm_append_coherence", None)]:
        result = grade(name, trial, config)
        assert result.passed and result.score == 1.0, (name, result.rationale)


def test_editing_without_reading_fails_read_before_write(tmp_path):
    trial = outcome(tmp_path, FILED[1:])
    result = grade("pkm_read_before_write", trial)
    assert not result.passed and result.score == 0.0
    assert "Areas/Health/running.md" in result.rationale
    required = grade("pkm_read_before_write", trial, {"required_read_path": "Areas/Health/running.md"})
    assert not required.passed and "never read" in required.rationale


def test_reading_after_the_edit_does_not_count(tmp_path):
    trial = outcome(tmp_path, [FILED[1], FILED[0], FILED[2]])
    assert not grade("pkm_read_before_write", trial).passed
    assert "changed before it was read" in grade(
        "pkm_read_before_write", trial, {"required_read_path": "Areas/Health/running.md"}).rationale


def test_read_before_write_does_not_apply_to_new_files(tmp_path):
    trial = outcome(tmp_path, [("Write", {"path": "Areas/Health/sleep.md", "content": "# Sleep\n" + NEW_LINE}),
                               ("update_timeline_card_insight", INSIGHT)])
    result = grade("pkm_read_before_write", trial)
    assert result.score is None and result.passed


def test_a_moved_file_keeps_its_seed_marker_and_passes_no_overwrite(tmp_path):
    trial = outcome(tmp_path, [("Move", {"src": "Projects/Kitchen", "dst": "Archives/Kitchen"}),
                               ("Read", {"path": "Archives/Kitchen/plan.md"}),
                               ("Edit", {"path": "Archives/Kitchen/plan.md", "old_string": "# Kitchen\n",
                                         "new_string": "# Kitchen (done)\n"})])
    assert grade("pkm_no_overwrite", trial).passed
    assert grade("pkm_no_overwrite", trial, {"seed_marker": "fact_pkm_kitchen_001"}).score == 1.0
    # the read at the new path counts for the file's origin
    assert grade("pkm_read_before_write", trial).passed


def test_deleting_a_seed_entry_fails_no_overwrite_and_names_the_marker(tmp_path):
    trial = outcome(tmp_path, [("Read", {"path": "Areas/Health/running.md"}),
                               ("Edit", {**APPEND, "new_string": NEW_LINE})])
    result = grade("pkm_no_overwrite", trial)
    assert not result.passed and "fact_pkm_running_002" in result.rationale
    assert result.score == pytest.approx(2 / 3)
    assert grade("pkm_no_overwrite", trial, {"seed_marker": "<!-- fact_id: fact_pkm_running_001 -->"}).passed
    assert grade("pkm_append_coherence", trial).score == 0.0


@pytest.mark.parametrize("expect,passes", [("skip", True), ("any", True), ("persist", False)])
def test_a_clean_skip_passes_completion_only_where_skipping_is_allowed(tmp_path, expect, passes):
    trial = outcome(tmp_path, SKIPPED)
    assert grade("pkm_completion", trial, {"expect": expect}).passed is passes


def test_a_skip_after_a_change_is_not_a_clean_skip(tmp_path):
    trial = outcome(tmp_path, [("Write", {"path": "Resources/hi.md", "content": "hi\n"})] + SKIPPED)
    result = grade("pkm_completion", trial, {"expect": "skip"})
    assert not result.passed and "after changing files" in result.rationale


def test_filing_a_note_that_should_be_skipped_fails_completion(tmp_path):
    trial = outcome(tmp_path, FILED)
    result = grade("pkm_completion", trial, {"expect": "skip"})
    assert not result.passed and "filed" in result.rationale


def test_graders_that_do_not_apply_to_a_skip_return_null(tmp_path):
    trial = outcome(tmp_path, SKIPPED)
    for name, config in [("pkm_routed_correctly", {"expected_buckets": ["Areas"]}), ("pkm_fact_id_preserved", None),
                         ("pkm_insight_quality", None), ("pkm_append_coherence", None)]:
        result = grade(name, trial, config)
        assert result.score is None and result.passed, name


def test_routing_gives_full_half_and_no_credit(tmp_path):
    exact = outcome(tmp_path / "a", FILED)
    pinned = {"expected_buckets": ["Areas/Health/"], "expected_files": ["Areas/Health/running.md"]}
    assert grade("pkm_routed_correctly", exact, pinned).score == 1.0
    nearby = outcome(tmp_path / "b", [("Write", {"path": "Areas/Health/runs-2026.md", "content": NEW_LINE}),
                                      ("update_timeline_card_insight", INSIGHT)])
    half = grade("pkm_routed_correctly", nearby, pinned)
    assert half.score == 0.5 and half.passed
    assert not grade("pkm_routed_correctly", nearby, {**pinned, "min_score": 1.0}).passed
    assert grade("pkm_routed_correctly", nearby, {"expected_buckets": ["Areas/Health"]}).score == 1.0
    # whole path segments: Areas/Health does not cover Areas/Healthy
    wrong = outcome(tmp_path / "c", [("Write", {"path": "Areas/Healthy/x.md", "content": NEW_LINE})])
    assert grade("pkm_routed_correctly", wrong, pinned).score == 0.0
    assert not grade("pkm_fact_id_preserved", outcome(tmp_path / "d", [
        ("Write", {"path": "Areas/Health/x.md", "content": "no marker\n"})])).passed


def test_no_insight_scores_zero_without_asking_the_judge(tmp_path):
    trial = outcome(tmp_path, FILED[:2])
    result = grade("pkm_insight_quality", trial)
    assert result.score == 0.0 and not result.passed and "no insight" in result.rationale


def test_a_restating_insight_is_marked_down_and_the_result_names_model_and_rubric(tmp_path):
    restated = {"fact_id": FACT_ID, "insight_text": "Ran 8k with 5:40 pace and the knee was ok."}
    trial = outcome(tmp_path, FILED[:2] + [("update_timeline_card_insight", restated)])
    result = grade("pkm_insight_quality", trial)
    assert result.details["judge_outputs"]["non_redundancy"] == 0.0
    assert result.details["judge_model"] == "mock/sim" and len(result.details["rubric_hash"]) == 12
    assert result.score < 1.0


def test_a_paragraph_dropped_into_a_bullet_list_gets_half_coherence(tmp_path):
    paragraph = {**APPEND, "new_string": APPEND["old_string"] + "\nRan 8k today. <!-- fact_id: 2026/05/25.md#ts_1 -->\n"}
    trial = outcome(tmp_path, [FILED[0], ("Edit", paragraph), FILED[2]])
    result = grade("pkm_append_coherence", trial)
    assert result.score == 0.5 and not result.passed


def test_a_judge_that_answers_garbage_makes_the_grader_errored_not_failed(tmp_path, monkeypatch):
    from optimizer.trials import judging
    from optimizer.trials.runner import Runner

    judge = judging.get_judge("pkm_insight_quality")
    monkeypatch.setitem(judging._registry, judge.name, dataclasses.replace(
        judge, offline=lambda inputs: {"rationale": "?", "groundedness": 7, "non_redundancy": "lots",
                                       "expression": None}))
    trial = outcome(tmp_path, FILED)
    task = Task.model_validate({"id": "t", "input": {"content": "ran 8k", "fact_id": FACT_ID},
                                "graders": [{"name": "pkm_fact_id_preserved"}, {"name": "pkm_insight_quality"}]})
    runner = Runner.__new__(Runner)
    runner.judge = JudgeSettings(model="mock/sim", retry_attempts=1)
    results = [runner._grade(task, trial, index) for index in range(2)]
    assert results[0].passed and not results[0].errored
    assert results[1].errored and results[1].score is None
    assert "no usable answer" in results[1].rationale or "out of range" in results[1].rationale


def public_format_suite(tmp_path: Path, expected_outcome: dict,
                        graders: tuple[str, ...] = ("pkm_completion", "pkm_routed_correctly")) -> Task:
    """A suite folder as the public format writes it: graders named without config, the expected
    result only in `reference_solution.expected_outcome`."""
    from optimizer.suites import load_suite
    root = tmp_path / "public_pkm"
    (root / "tasks").mkdir(parents=True)
    (root / "suite.json").write_text('{"name": "public_pkm", "agent_name": "pkm_agent"}', encoding="utf-8")
    task = {"id": "run_log", "metadata": {"failure_bucket": "route_into_existing_file"},
            "input": {"content": "ran 8k, 5:40 pace, knee ok", "fact_id": FACT_ID},
            "reference_solution": {"expected_outcome": expected_outcome},
            "graders": [{"name": name} for name in graders]}
    (root / "tasks" / "run_log.json").write_text(json.dumps(task), encoding="utf-8")
    return load_suite(str(root), tmp_path).tasks[0]


def grade_as_run(task: Task, trial: Trial) -> dict:
    """Every grader of the task on the trial, with its config as the runner builds it."""
    results = {}
    for index, spec in enumerate(task.graders):
        entry = get_grader(spec.name)
        config = entry.parse_config(entry.task_config(task, spec.config), path=None, where=f"graders[{index}]")
        results[spec.name] = entry.func(task, trial, config)
    return results


@pytest.mark.parametrize("expected", [{"wrote_para": True, "files": ["Areas/Health/running.md"]},
                                      {"skipped": False, "buckets": ["Areas/Health"]},
                                      {"is_complete": True, "skipped_pkm": False,
                                       "files": ["Areas/Health/running.md"]}])
def test_a_public_format_task_that_must_be_filed_fails_a_skip_and_passes_a_right_filing(tmp_path, expected):
    task = public_format_suite(tmp_path, expected)
    skipped = grade_as_run(task, outcome(tmp_path / "skip", SKIPPED))
    assert not skipped["pkm_completion"].passed and skipped["pkm_completion"].details["path"] == "persist"
    filed = grade_as_run(task, outcome(tmp_path / "filed", FILED))
    assert filed["pkm_completion"].passed and filed["pkm_routed_correctly"].score == 1.0
    misplaced = outcome(tmp_path / "wrong", [("Write", {"path": "Projects/Kitchen/run.md", "content": NEW_LINE}),
                                             ("update_timeline_card_insight", INSIGHT)])
    assert not grade_as_run(task, misplaced)["pkm_routed_correctly"].passed


@pytest.mark.parametrize("expected", [{"wrote_para": False, "buckets": ["Areas"]},
                                      {"is_complete": True, "skipped_pkm": True},
                                      {"is_complete": True, "skipped_pkm": True, "files": []}])
def test_a_public_format_task_that_must_be_skipped_passes_a_skip_and_fails_a_filing(tmp_path, expected):
    """`is_complete: true` says the agent finished; beside `skipped_pkm: true` the note is a skip."""
    task = public_format_suite(tmp_path, expected, graders=("pkm_completion",))
    assert grade_as_run(task, outcome(tmp_path / "skip", SKIPPED))["pkm_completion"].passed
    assert not grade_as_run(task, outcome(tmp_path / "filed", FILED))["pkm_completion"].passed


@pytest.mark.parametrize("expected", [{"wrote_para": True, "skipped": True, "buckets": ["Areas"]},
                                      {"skipped_pkm": True, "skipped": False},
                                      {"skipped_pkm": False, "wrote_para": False}])
def test_an_expected_outcome_that_both_skips_and_writes_is_refused_when_the_suite_loads(tmp_path, expected):
    from optimizer.errors import TaskFileError
    with pytest.raises(TaskFileError) as caught:
        public_format_suite(tmp_path, expected)
    assert caught.value.field == "reference_solution.expected_outcome"
    assert "both skip and file" in str(caught.value)


def test_a_grader_config_overrides_the_expected_outcome(tmp_path):
    task = Task.model_validate({"id": "t", "input": {"content": "ok"},
                                "reference_solution": {"expected_outcome": {"skipped": False}},
                                "graders": [{"name": "pkm_completion", "config": {"expect": "any"}}]})
    assert grade_as_run(task, outcome(tmp_path, SKIPPED))["pkm_completion"].passed
