"""benchmarks/legacy_gate.py, the earlier gate that `gate_power.py`'s `previous` arm decides with:
its targeted stage, its second look and its full-stage harm rule."""

from __future__ import annotations

import importlib.util
import sys

import pandas as pd

from tests.conftest import PROJECT_ROOT

spec = importlib.util.spec_from_file_location("legacy_gate", PROJECT_ROOT / "benchmarks" / "legacy_gate.py")
legacy_gate = importlib.util.module_from_spec(spec)
sys.modules.setdefault("legacy_gate", legacy_gate)
spec.loader.exec_module(legacy_gate)

CONFIG = legacy_gate.per_look(legacy_gate.GateConfig(), 2)


def frame(scores: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """Trials of suite `s`: one task per (bucket, task id), its scores at trial indexes 0, 1, ..."""
    return pd.DataFrame([{"suite": "s", "task_id": task, "bucket": bucket, "split": "train", "trial_index": index,
                          "status": "passed" if score == 1 else "failed", "score": score}
                         for (bucket, task), values in scores.items() for index, score in enumerate(values)])


def test_the_previous_gate_accepts_a_target_that_rose_on_every_pair_and_harmed_nothing():
    before = frame({("a", "t1"): [0.0] * 6, ("a", "t2"): [0.0] * 6, ("b", "t3"): [1.0] * 6})
    after = frame({("a", "t1"): [1.0] * 6, ("a", "t2"): [1.0] * 6, ("b", "t3"): [1.0] * 6})
    for stage in ("targeted", "full"):
        assert legacy_gate.decide(before, after, targets={("s", "a")}, config=CONFIG, stage=stage).accepted


def test_a_target_that_rose_on_too_few_pairs_gets_a_second_look():
    before = frame({("a", "t1"): [0.0, 0.0, 0.0]})
    after = frame({("a", "t1"): [1.0, 1.0, 0.0]})
    decision = legacy_gate.decide(before, after, targets={("s", "a")}, config=CONFIG, stage="targeted")
    assert not decision.accepted and legacy_gate.borderline(decision)
    assert decision.targeted[0].change > 0


def test_the_full_stage_refuses_a_patch_that_drops_another_bucket_past_the_limit():
    before = frame({("a", "t1"): [0.0] * 6, ("b", "t2"): [1.0] * 6})
    after = frame({("a", "t1"): [1.0] * 6, ("b", "t2"): [1.0, 1.0, 1.0, 1.0, 0.5, 0.5]})
    assert legacy_gate.decide(before, after, targets={("s", "a")}, config=CONFIG, stage="targeted").accepted
    assert not legacy_gate.decide(before, after, targets={("s", "a")}, config=CONFIG, stage="full").accepted
