"""The comparison's phases, stepped by hand as `compare` steps them: each names its next batch of
trials, takes the results back, and ends the comparison or hands over to the next phase."""

from __future__ import annotations

from optimizer.comparison.compare import compare
from optimizer.comparison.phases import Comparing, HarmPhase, RestPhase, TargetPhase
from optimizer.comparison.plan import PairPlan
from optimizer.gate import GatePolicy, PairTable

from tests.optimizer.gate.test_gate import FixedSides, ScriptedSides, planned_items


def comparing(sides, planned, baseline, targets=(("s", "a"),), policy=GatePolicy()) -> Comparing:
    return Comparing(policy=policy, targets=sorted(targets), regression=set(), named=frozenset(), planned=planned,
                     baseline=baseline, agent="card_agent", plan=PairPlan(planned, baseline),
                     table=PairTable(), ran=sides.ran)


def run(sides, batch):
    base = sides.base(batch.base, batch.label) if batch.base else []
    return batch.held + base, sides.candidate(batch.candidate, batch.label)


def test_the_target_phase_names_fresh_pairs_of_its_targets_until_they_are_shown_improved():
    planned = planned_items({"a": 2, "b": 2})
    sides = FixedSides({"base": {(f"a{n}", i) for n in range(2) for i in range(64)}, "candidate": set()})
    baseline = sides._draw("base", planned)
    sides.count = 0
    state = comparing(sides, planned, baseline)
    phase = TargetPhase(state)
    batches = []
    while (batch := phase.next_batch()) is not None:
        batches.append(batch)
        phase.record(*run(sides, batch))
    first = batches[0]
    assert first.label == "targeted" and first.note == "targets: 8 fresh pairs (base prompt and candidate) of s/a"
    assert sorted((item.task.id, item.index) for item in first.candidate) == [
        (task, index) for task in ("a0", "a1") for index in range(4, 8)]
    assert [item.index for item in first.base] == [item.index for item in first.candidate] and not first.held
    assert phase.decision() is None  # shown improved: the rest comes next
    assert state.batches == len(batches) and state.table.count(("s", "b0")) == 0


def test_the_target_phase_ends_the_comparison_when_a_target_is_not_shown_improved():
    planned = planned_items({"a": 1, "b": 2})
    sides = ScriptedSides({"a": 0.5, "b": 0.6}, {"a": 0.5, "b": 0.6}, seed=4)
    baseline = sides._draw("base", planned)
    sides.count = 0
    phase = TargetPhase(comparing(sides, planned, baseline))
    while (batch := phase.next_batch()) is not None:
        phase.record(*run(sides, batch))
    decision = phase.decision()
    assert decision is not None and decision.stage == "targeted" and not decision.accepted
    assert decision.rollouts == sides.ran()


def test_the_rest_phase_pairs_the_candidate_once_with_the_baselines_own_trials():
    planned = planned_items({"a": 1, "b": 2, "c": 1}, lone_task_factor=3)
    sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.6})
    baseline = sides._draw("base", planned)
    sides.count = 0
    phase = RestPhase(comparing(sides, planned, baseline))
    batch = phase.next_batch()
    assert batch.label == "rest" and not batch.base and batch.held == baseline
    assert sorted({item.task.id for item in batch.candidate}) == ["b0", "b1", "c0"]
    assert not [item for item in batch.candidate if item.reserve]  # c0's extra trials wait for a harm check
    phase.record(*run(sides, batch))
    assert phase.next_batch() is None and phase.decision() is None
    assert phase.state.batches == 0 and phase.state.table.count(("s", "c0")) == 4


def test_the_harm_phase_first_brings_every_group_to_its_floor_then_decides():
    planned = planned_items({"a": 1, "b": 2, "c": 1})
    sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.6}, seed=1)
    baseline = sides._draw("base", planned)
    sides.count = 0
    state = comparing(sides, planned, baseline)
    rest = RestPhase(state)
    rest.record(*run(sides, rest.next_batch()))
    phase = HarmPhase(state)
    floor = phase.next_batch()
    assert floor.note == ("harm check: every other bucket up to its minimum of pairs (min_bucket_pairs): "
                          f"{len(floor.candidate)} more pairs")
    assert {item.task.id for item in floor.candidate} == {"c0"}  # b's two tasks already have 8 pairs
    assert [item.index for item in floor.candidate] == [4, 5, 6, 7]
    phase.record(*run(sides, floor))
    while (batch := phase.next_batch()) is not None:
        phase.record(*run(sides, batch))
    decision = phase.decision()
    assert decision.stage == "full" and decision.rollouts == sides.ran()


def test_compare_steps_the_phases_and_logs_each_batch_it_runs():
    planned = planned_items({"a": 1, "b": 2, "c": 1})
    sides = ScriptedSides({"a": 0.1, "b": 0.6, "c": 0.6}, {"a": 0.95, "b": 0.6, "c": 0.6})
    baseline = sides._draw("base", planned)
    sides.count = 0
    lines: list[str] = []
    result = compare(sides, planned=planned, baseline=baseline, targets={("s", "a")}, agent="card_agent",
                     log=lines.append)
    rest = [line for line in lines if line.startswith("rest:")]
    assert lines[0].startswith("targets: ") and rest == ["rest: 12 candidate trials (other buckets, holdout, regression)"]
    assert result.batches == len(lines) - 1  # the rest is no batch of pairs
    assert result.rollouts == result.decision.rollouts == sides.ran()
