"""`benchmarks/transfer.py`'s figures of one side: the trial pass rate, pass@k, pass^k and mean
score overall and per bucket, and each task's pass rate, from the same task figures `optimizer
eval` reports (`optimizer.scoring`)."""

from __future__ import annotations

import pytest

from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT
from tests.helpers import benchmark_module


@pytest.fixture(scope="module")
def transfer():
    yield from benchmark_module("transfer")


def trial(task_id: str, bucket: str, index: int, status: str, score: float | None) -> Trial:
    return Trial(suite="card_agent_test", task_id=task_id, bucket=bucket, split="test", index=index,
                 status=status, score=score)


TRIALS = [trial("a", "quote", 0, "passed", 1.0), trial("a", "quote", 1, "failed", 0.5),
          trial("b", "quote", 0, "passed", 1.0), trial("b", "quote", 1, "passed", 0.9),
          trial("c", "skip", 0, "errored", None), trial("c", "skip", 1, "failed", 0.2),
          trial("d", "skip", 0, "errored", None), trial("d", "skip", 1, "errored", None)]


def test_a_side_counts_scored_trials_and_averages_tasks(transfer):
    summary = transfer.side_summary(TRIALS)
    overall, quote, skip = summary["overall"], summary["buckets"]["quote"], summary["buckets"]["skip"]
    assert overall["trials"] == 8 and overall["errored"] == 3
    assert overall["pass_rate"] == pytest.approx(3 / 5), "errored trials are not in the pass rate"
    assert overall["pass_at_k"] == pytest.approx(2 / 3), "task d had no scored trial: no pass@k"
    assert overall["pass_hat_k"] == pytest.approx(1 / 3)
    assert overall["mean_score"] == pytest.approx((0.75 + 0.95 + 0.2) / 3)
    assert quote == {"trials": 4, "errored": 0, "pass_rate": pytest.approx(0.75), "pass_at_k": 1.0,
                     "pass_hat_k": 0.5, "mean_score": pytest.approx(0.85)}
    assert skip["pass_rate"] == 0.0 and skip["pass_at_k"] == 0.0 and skip["mean_score"] == pytest.approx(0.2)


def test_each_task_rate_leaves_out_a_task_with_nothing_scored(transfer):
    assert transfer.task_rates(TRIALS) == {"a": 0.5, "b": 1.0, "c": 0.0}


def test_code_graders_only_takes_every_judge_off_and_keeps_the_filing_graders(transfer):
    from optimizer.registry import get_grader
    from optimizer.suites import load_suites, reading_sealed

    with reading_sealed():
        suites = load_suites([transfer.SEALED["pkm_agent"]], PROJECT_ROOT)
    judged = [spec.name for task in suites[0].tasks for spec in task.graders if get_grader(spec.name).judge]
    assert judged, "the sealed PKM tasks have a judge to take off"
    kept = transfer.without_judges(suites)[0]
    assert [task.id for task in kept.tasks] == [task.id for task in suites[0].tasks]
    assert not [spec.name for task in kept.tasks for spec in task.graders if get_grader(spec.name).judge]
    assert all({"pkm_completion"} <= {spec.name for spec in task.graders} for task in kept.tasks)


def test_code_graders_only_names_a_task_graded_by_judges_alone_and_refuses_to_leave_none(transfer, capsys):
    from optimizer.registry import get_grader
    from optimizer.suites import load_suites, reading_sealed

    with reading_sealed():
        suite = load_suites([transfer.SEALED["pkm_agent"]], PROJECT_ROOT)[0]
    first, *rest = suite.tasks
    judge_only = first.model_copy(update={"graders": [spec for spec in first.graders
                                                      if get_grader(spec.name).judge]})
    kept = transfer.without_judges([suite.model_copy(update={"tasks": [judge_only, *rest]})])[0]
    assert [task.id for task in kept.tasks] == [task.id for task in rest]
    assert f"left out 1 task(s) graded by judges alone: {first.id}" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="leaves no task with a grader"):
        transfer.without_judges([suite.model_copy(update={"tasks": [judge_only]})])


def test_a_record_is_keyed_by_the_agent_build_so_a_changed_tool_text_is_not_reused(transfer, tmp_path, monkeypatch):
    """A trial recorded before the agent's tool answers changed is not one of the agent as it is."""
    from optimizer.registry import AgentEntry

    package = tmp_path / "fake_transfer_agent"
    package.mkdir()
    (package / "__init__.py").write_text("def run(context):\n    return None\n", encoding="utf-8")
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "fake.md").write_text("You file notes.\n", encoding="utf-8")
    answers = tmp_path / "prompts" / "fake.filing.yaml"
    answers.write_text('skipped: "skipped"\n', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_transfer_agent

    entry = AgentEntry(name="fake", run=fake_transfer_agent.run, prompt_file="prompts/fake.md")
    before = transfer.agent_build(entry)
    assert transfer.agent_build(entry) == before, "the same checkout gives the same build"
    answers.write_text('skipped: "nothing is skipped yet; call it again"\n', encoding="utf-8")
    after = transfer.agent_build(entry)
    assert after != before

    record = transfer.TrialRecord(tmp_path / "record.jsonl")
    key = {"agent": "fake", "commit": "c0ffee", "agent_build": before}
    record.add(key, "h", trial("a", "quote", 0, "passed", 1.0))
    assert list(record.recorded(key, {"a": "h"})) == [("a", 0)]
    assert record.recorded(key | {"agent_build": after}, {"a": "h"}) == {}
