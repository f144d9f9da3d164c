"""Target selection prefers the failures a prompt can change: confusions the graders name."""

from __future__ import annotations

from optimizer import GraderResult, Trial
from optimizer.proposal.request import load_manual, render_request, select_targets
from optimizer.suites import load_suites
from optimizer.proposal.targets import bucket_confusions
from tests.helpers import PROJECT_ROOT

SUITES = load_suites(["card_agent"], PROJECT_ROOT)
TASKS = {task.bucket: sorted(t.id for t in SUITES[0].tasks if t.bucket == task.bucket and t.split == "train")
         for task in SUITES[0].tasks}


def trial(bucket: str, task: str, index: int, result: GraderResult | None) -> Trial:
    failed = result is not None
    return Trial(suite="card_agent", task_id=task, bucket=bucket, split="train", index=index,
                 status="failed" if failed else "passed", score=0.0 if failed else 1.0,
                 grader_results=[result] if result else [])


def template_confusion(got: str, expected: str) -> GraderResult:
    return GraderResult(grader="card_template_choice", score=0.0, passed=False, rationale="wrong template",
                        details={"confusion": {"got": got, "expected": expected}})


UNNAMED = GraderResult(grader="card_must_contain", score=0.5, passed=False, rationale="missing: '10:30'",
                       details={"missing": ["10:30"]})


def baseline() -> list[Trial]:
    """fact_preservation: two tasks fail 3 of 4 trials each for no named reason (1.5 failing per
    round); template_quote: its one task fails every trial as an event (1 per round, named)."""
    unnamed = [trial("fact_preservation", task, index, UNNAMED if index else None)
               for task in TASKS["fact_preservation"][:2] for index in range(4)]
    quote = TASKS["template_quote"][0]
    return unnamed + [trial("template_quote", quote, index, template_confusion("event", "quote")) for index in range(4)]


def test_a_bucket_whose_failures_the_graders_name_outranks_a_bucket_failing_more_for_no_named_reason():
    selection = select_targets(baseline(), SUITES, max_targets=2, prefer_named=True)
    assert [t.bucket for t in selection.targets] == ["template_quote", "fact_preservation"]
    assert [t.bucket for t in select_targets(baseline(), SUITES, max_targets=2).targets] == \
        ["fact_preservation", "template_quote"], "ranked by headroom alone unless asked"
    assert selection.targets[0].confusions == (("event where quote was expected (card_template_choice)", 4),)
    assert selection.targets[1].confusions == ()


def test_without_named_confusions_the_bucket_failing_most_is_still_first():
    plain = [t if t.bucket != "template_quote" or t.status == "passed" else
             trial("template_quote", t.task_id, t.index, UNNAMED) for t in baseline()]
    assert [t.bucket for t in select_targets(plain, SUITES, prefer_named=True).targets] == ["fact_preservation"]


def test_confusions_come_only_from_failed_train_trials():
    holdout = trial("template_quote", "x", 9, template_confusion("link", "quote")).model_copy(update={"split": "holdout"})
    passed = trial("template_quote", "x", 8, None)
    passed.grader_results = [template_confusion("mood", "quote").model_copy(update={"passed": True})]
    counts = bucket_confusions(baseline() + [holdout, passed])
    assert {c.got: n for c, n in counts[("card_agent", "template_quote")].items()} == {"event": 4}


def test_the_request_shows_the_targets_confusions():
    selection = select_targets(baseline(), SUITES, prefer_named=True)
    text, _ = render_request(selection=selection, failures=[], prompt="prompt", prompt_file="p.md",
                             manual=load_manual(PROJECT_ROOT, "card_agent"), iteration_id="it",
                             base_commit="0" * 40, agent_model="mock/sim", max_changed_lines=3, token_budget=10_000)
    assert "  - event where quote was expected (card_template_choice): 4 failed trials" in text


def test_named_confusions_lead_on_the_embedded_agent_model_or_when_set():
    from optimizer.settings.config import Settings
    from optimizer.proposal.targets import prefers_named

    assert Settings().target_order == "auto"
    assert prefers_named("auto", "local/qwen2.5-coder-1.5b")
    assert not prefers_named("auto", "mock/sim")
    assert prefers_named("changeable", "mock/sim")
    assert not prefers_named("headroom", "local/qwen2.5-coder-1.5b")
