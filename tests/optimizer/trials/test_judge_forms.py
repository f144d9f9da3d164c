"""A judge's small-model form: the same outputs asked one criterion per call (an answer of 0, 1
or 2), used under `auto` on the embedded model. A calibration counts for the form it measured."""

from __future__ import annotations

import json

from optimizer.trials.calibration import judge_status
from optimizer.trials.judging import JudgeSettings, ask, get_judge
from optimizer.registry import load_plugins
from optimizer.store import Store

INPUTS = {"note": "10k this morning, 5:38/km. Left calf tight again from about km 7.",
          "knowledge": "=== Areas/Health/running.md ===\n- intervals, left calf tight on the cooldown\n",
          "insight": "The calf tightened again, as after the intervals earlier this month."}


def test_auto_asks_the_embedded_model_one_criterion_at_a_time_and_any_other_model_the_rubric():
    load_plugins()
    judge = get_judge("pkm_insight_quality")
    assert [c.name for c in judge.criteria] == ["groundedness", "non_redundancy", "expression"]
    assert judge.form_for("local/qwen2.5-coder-1.5b") == "criteria"
    assert judge.form_for("openai/gpt-4o-mini") == "rubric"
    assert judge.form_for("local/qwen2.5-coder-1.5b", "rubric") == "rubric"
    assert judge.wording_hash("criteria") != judge.wording_hash("rubric")


def test_the_criteria_form_goes_through_the_model_and_scores_like_the_rubric_on_mock_models():
    load_plugins()
    judge = get_judge("pkm_insight_quality")
    by_rubric = ask(judge, INPUTS, JudgeSettings(model="mock/sim", retry_attempts=1, form="rubric"))
    by_criteria = ask(judge, INPUTS, JudgeSettings(model="mock/sim", retry_attempts=1, form="criteria"))
    # three calls through litellm and dspy, each answered 0, 1 or 2 by the mock's offline heuristic
    assert by_criteria.usage.calls == 3 and by_rubric.usage.calls == 1
    assert {k: v for k, v in by_criteria.outputs.items() if k != "rationale"} == \
        {k: v for k, v in by_rubric.outputs.items() if k != "rationale"}
    assert by_criteria.outputs["rationale"].startswith("asked one criterion at a time: groundedness")
    assert by_criteria.rubric_hash == judge.wording_hash("criteria")
    assert by_criteria.details(judge)["rubric"] == "criteria"


def test_a_calibration_counts_for_the_form_it_measured(cli, isolated, tmp_path):
    out = tmp_path / "calibration.json"
    code, stdout, stderr = cli("judges", "calibrate", "--judge-model", "mock/sim", "--judge-form", "criteria",
                               "--json", str(out))
    assert code == 0, stdout + stderr
    report = json.loads(out.read_text())
    assert {judge["form"] for judge in report["judges"]} == {"criteria"}
    store = Store(f"sqlite:///{isolated / 'optimizer.db'}")
    status = judge_status(store, ["pkm_insight_quality"], "mock/sim")[0]
    # runs on mock/sim ask the rubric form, which this calibration did not measure
    assert status["spearman"] is None and "not calibrated" in status["reason"]
    store.close()
    code, stdout, stderr = cli("judges", "calibrate", "--judge-model", "mock/sim", "--judge-form", "sometimes")
    assert code == 2 and "--judge-form" in stderr
