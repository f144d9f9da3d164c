"""The sealed test split (`sealed/`, every task `split: "test"`): no part of the loop can read it,
it covers every bucket of its agent's suite, and every task's reference solution scores 1.0."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

SEALED = {"card_agent": ("sealed/card_agent_test", 25), "pkm_agent": ("sealed/pkm_agent_test", 16)}


def transfer():
    """benchmarks/transfer.py as a module (benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("transfer", PROJECT_ROOT / "benchmarks" / "transfer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
"""Per agent: its sealed suite and the fewest tasks it holds."""


def test_a_suite_holding_a_sealed_task_loads_only_inside_reading_sealed(tmp_path):
    from optimizer.errors import TaskFileError
    from optimizer.suites import load_suite, reading_sealed

    suite = tmp_path / "suites" / "mine"
    shutil.copytree(PROJECT_ROOT / "suites" / "card_agent", suite)
    (suite / "suite.json").write_text((suite / "suite.json").read_text().replace('"card_agent"', '"mine"', 1))
    task = next((suite / "tasks").rglob("card_event_standup_zoom.json"))
    data = json.loads(task.read_text())
    data["metadata"]["split"] = "test"
    task.write_text(json.dumps(data))
    with pytest.raises(TaskFileError, match="sealed test split") as raised:
        load_suite(str(suite), tmp_path)
    assert raised.value.field == "metadata.split" and "benchmarks/transfer.py" in raised.value.fix
    with reading_sealed():
        assert any(t.split == "test" for t in load_suite(str(suite), tmp_path).tasks)
    with pytest.raises(TaskFileError):
        load_suite(str(suite), tmp_path)  # the seal closes again


def test_only_the_transfer_benchmark_opens_the_seal():
    opened = sorted(str(path.relative_to(PROJECT_ROOT)) for folder in ("optimizer", "benchmarks", "agents")
                    for path in (PROJECT_ROOT / folder).rglob("*.py")
                    if re.search(r"reading_sealed\(\)|sealed/", path.read_text(encoding="utf-8")))
    assert opened == ["benchmarks/transfer.py", "optimizer/suites.py"]


@pytest.mark.parametrize("agent", sorted(SEALED))
def test_a_sealed_suite_covers_every_bucket_of_its_agent_and_is_all_test_split(agent):
    from optimizer.suites import load_suite, reading_sealed

    folder, fewest = SEALED[agent]
    with reading_sealed():
        sealed = load_suite(folder, PROJECT_ROOT)
    open_suite = load_suite(agent, PROJECT_ROOT)
    assert sealed.spec.agent_name == agent and len(sealed.tasks) >= fewest
    assert {task.split for task in sealed.tasks} == {"test"}
    assert {task.bucket for task in sealed.tasks} == {task.bucket for task in open_suite.tasks}
    assert not {task.id for task in sealed.tasks} & {task.id for task in open_suite.tasks}
    assert not {task.input.content for task in sealed.tasks} & {task.input.content for task in open_suite.tasks}, \
        "no sealed note is a note of the open suite"


def test_every_sealed_task_replays_its_reference_solution_at_score_1():
    from optimizer.suites import reading_sealed
    from optimizer.validate import validate_suites

    with reading_sealed():
        report = validate_suites(PROJECT_ROOT, [folder for folder, _ in SEALED.values()])
    assert [(entry.name, entry.failures, entry.unreplayed) for entry in report] == [
        ("card_agent_test", [], []), ("pkm_agent_test", [], [])]


def test_the_transfer_benchmarks_paired_test_is_the_exact_sign_flip_test():
    sign_flip_p = transfer().sign_flip_p

    assert sign_flip_p([0.5, 0.25, 0.25]) == 2 / 8  # all positive: only all-plus and all-minus are as extreme
    assert sign_flip_p([0.0, 0.0]) == 1.0
    assert sign_flip_p([1.0, -1.0]) == 1.0
    assert 0.0 < sign_flip_p([0.25] * 30) < 1e-5  # past 20 tasks: Monte Carlo, never exactly 0


def test_the_transfer_benchmarks_interval_is_the_sign_flip_test_inverted():
    module = transfer()
    interval = module.sign_flip_interval

    assert interval([]) is None
    low, high = interval([0.25] * 30)  # every task moved alike: only that shift is not refused
    assert abs(low - 0.25) < 0.002 and abs(high - 0.25) < 0.002
    differences = [0.5, 0.25, -0.125, 0.0, 0.375, 0.125, -0.25, 0.25, 0.125, 0.0, 0.375, 0.25, 0.5]
    low, high = interval(differences)
    mean = sum(differences) / len(differences)
    assert low < mean < high
    # each end is where the test of the shifted differences crosses 0.05
    assert module.sign_flip_p([d - (low - 0.01) for d in differences]) <= 0.05 + 0.01
    assert module.sign_flip_p([d - (low + 0.01) for d in differences]) > 0.05
    assert module.sign_flip_p([d - (high + 0.01) for d in differences]) <= 0.05 + 0.01
    # away from the edge the test and the interval agree: p under 0.05 here, the interval above 0
    assert module.sign_flip_p(differences) < 0.04 and low > 0.02
    assert module.sign_flip_p(differences[:6]) > 0.1 and interval(differences[:6])[0] < 0


def test_the_transfer_benchmark_measures_one_prompt_against_itself_as_no_change():
    measure = transfer().measure

    result = measure("card_agent", "HEAD", "HEAD", 1, {"agent_model": "mock/sim", "judge_model": "mock/sim",
                                                       "sim_noise": "paired"})
    before, after = result["sides"]["before"], result["sides"]["after"]
    assert before["overall"]["trials"] == after["overall"]["trials"] >= 25
    assert before["overall"]["pass_rate"] == after["overall"]["pass_rate"]
    assert result["paired"]["mean_change"] == 0.0 and result["paired"]["p_two_sided"] == 1.0
    assert set(before["buckets"]) == set(after["buckets"]) and len(before["buckets"]) == 13


def test_the_transfer_benchmark_measures_the_train_and_holdout_splits_of_the_agents_own_suite():
    """For the table of all three splits: the same measurement on the tasks the loop tuned on and
    the ones its gate held out, each split alone."""
    measure = transfer().measure
    mock = {"agent_model": "mock/sim", "judge_model": "mock/sim", "sim_noise": "paired"}

    from optimizer.suites import load_suites

    (suite,) = load_suites(["card_agent"], PROJECT_ROOT)
    for split in ("train", "holdout"):
        result = measure("card_agent", "HEAD", "HEAD", 1, mock, split)
        assert (result["split"], result["suite"]) == (split, "card_agent")
        assert result["paired"]["tasks"] == sum(task.split == split for task in suite.tasks) > 0
        assert result["paired"]["mean_change"] == 0.0


def test_the_transfer_benchmark_counts_how_pkm_trials_filed_and_skipped():
    """For the PKM target (notes to file filed in the right place, notes to skip skipped and
    graded so): the reference solutions, replayed, file every note to file in its place and
    skip every note to skip; the printed line says so."""
    module = transfer()
    result = module.measure("pkm_agent", "HEAD", "HEAD", 1, {"agent_model": "mock/oracle", "judge_model": "mock/oracle"})
    counts = result["sides"]["before"]["filing"]

    from optimizer.suites import reading_sealed, load_suites
    from prompt_optimizer_graders.pkm import expected_path

    with reading_sealed():
        (suite,) = load_suites([module.SEALED["pkm_agent"]], PROJECT_ROOT)
    paths = [expected_path(task) for task in suite.tasks]
    assert counts == {"right place": paths.count("persist"), "rightly skipped": paths.count("skip")}
    assert paths.count("skip") >= 1 and paths.count("persist") >= 10
    assert f"in the right place {paths.count('persist')} (100%)" in module.filing_line(counts)
    assert module.filings("card_agent", []) == {}


def test_the_transfer_benchmark_runs_in_parts_through_its_record(tmp_path):
    """`--record`: a measurement too long for one sitting runs in parts; a later part runs only
    the trials the record lacks, and a line the script did not write is refused by its number."""
    module = transfer()
    mock = {"agent_model": "mock/sim", "judge_model": "mock/sim", "sim_noise": "paired"}
    record = tmp_path / "trials.jsonl"

    first = module.measure("card_agent", "HEAD", "HEAD", 1, mock, "holdout", record=record)
    tasks = first["paired"]["tasks"]
    assert len(record.read_text().splitlines()) == tasks
    assert (first["sides"]["before"]["reused"], first["sides"]["after"]["reused"]) == (0, tasks), \
        "the same commit measured the same way is the same side: the after side reuses the before side's trials"

    second = module.measure("card_agent", "HEAD", "HEAD", 2, mock, "holdout", record=record)
    assert (second["sides"]["before"]["reused"], second["sides"]["after"]["reused"]) == (tasks, 2 * tasks)
    assert second["sides"]["before"]["overall"]["trials"] == second["sides"]["after"]["overall"]["trials"] == 2 * tasks
    indices = sorted(json.loads(line)["trial"]["index"] for line in record.read_text().splitlines())
    assert indices == [0] * tasks + [1] * tasks, "only the second trial of each task ran"

    fresh = module.measure("card_agent", "HEAD", "HEAD", 2, mock, "holdout")
    assert fresh["sides"]["before"]["overall"] == pytest.approx(second["sides"]["before"]["overall"]), \
        "reused trials give the figures a fresh measurement gives (mock/sim reproduces by seed)"

    other_model = module.measure("card_agent", "HEAD", "HEAD", 1, {**mock, "seed": 7}, "holdout", record=record)
    assert other_model["sides"]["before"]["reused"] == 0, "another seed is another measurement"

    record.write_text(record.read_text() + "not json\n")
    with pytest.raises(SystemExit, match=r"trials\.jsonl:\d+: not a trial this script recorded"):
        module.measure("card_agent", "HEAD", "HEAD", 1, mock, "holdout", record=record)
