"""mock/sim is prompt-sensitive: the right general rule raises a bucket, other text does not."""

from __future__ import annotations


import pytest

from agents.card.sim import PROFILE
from optimizer.sim import decide
from optimizer.suites import load_suite
from tests.conftest import PROJECT_ROOT

BASE_PROMPT = (PROJECT_ROOT / "agents/prompts/card_agent.md").read_text()
EVENT_RULE = "When a note names a meeting or appointment with a concrete future time, use event."
CONTRADICTION = "Never use event for a meeting, even with a scheduled time."
IRRELEVANT = "Write titles in sentence case and keep them under sixty characters."


@pytest.fixture(scope="module")
def event_task():
    suite = load_suite("card_agent", PROJECT_ROOT)
    return next(t for t in suite.tasks if t.bucket == "template_event")


def pass_rate(task, prompt: str, trials: int = 300) -> float:
    return sum(decide(PROFILE, task, prompt, 0, i).passed for i in range(trials)) / trials


def test_stated_rule_raises_the_bucket_pass_rate(event_task):
    assert PROFILE.pass_probability(event_task, BASE_PROMPT) == PROFILE.base_rates["template_event"]
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + EVENT_RULE) >= 0.9
    assert pass_rate(event_task, BASE_PROMPT + "\n" + EVENT_RULE) > pass_rate(event_task, BASE_PROMPT) + 0.3


def test_irrelevant_text_changes_nothing(event_task):
    with_noise = BASE_PROMPT + "\n" + IRRELEVANT
    assert [decide(PROFILE, event_task, with_noise, 0, i).passed for i in range(100)] == \
           [decide(PROFILE, event_task, BASE_PROMPT, 0, i).passed for i in range(100)]


def test_contradicting_rule_lowers_the_pass_rate(event_task):
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + CONTRADICTION) <= 0.1


def test_concepts_split_across_sentences_do_not_state_the_rule(event_task):
    split = "Meetings matter. Use the right template. Times are important. Event cards exist."
    assert PROFILE.pass_probability(event_task, split) == PROFILE.base_rates["template_event"]


def test_a_rule_for_another_bucket_does_not_help(event_task):
    other = "Keep times, URLs, amounts and names exactly as written in the note."
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + other) == PROFILE.base_rates["template_event"]


def test_decisions_are_seeded_and_monotone(event_task):
    improved = BASE_PROMPT + "\n" + EVENT_RULE
    before = [decide(PROFILE, event_task, BASE_PROMPT, 7, i).passed for i in range(200)]
    again = [decide(PROFILE, event_task, BASE_PROMPT, 7, i).passed for i in range(200)]
    after = [decide(PROFILE, event_task, improved, 7, i).passed for i in range(200)]
    assert before == again
    assert 0 < sum(before) < 200, "trials of one task must be separate samples"
    assert all(a for b, a in zip(before, after) if b), "a stated rule never turns a pass into a fail"


@pytest.mark.parametrize("bucket", ["template_event", "template_metric", "template_task_routine",
                                    "fact_preservation", "trivial_input"])
def test_base_prompt_leaves_room_to_improve(bucket):
    assert PROFILE.rules[bucket].status(BASE_PROMPT) == "absent"


def test_failing_behaviour_per_bucket():
    suite = load_suite("card_agent", PROJECT_ROOT)
    import random

    for task in suite.tasks:
        calls = PROFILE.failing_calls(task, random.Random(1))
        reference = task.reference_solution.tool_calls[0].arguments
        if task.bucket == "trivial_input":
            assert calls == []
        elif task.bucket == "multi_fact_day":
            assert all(c.arguments["fact_id"] != reference["fact_id"] for c in calls)
        elif task.bucket == "fact_preservation":
            must = next(g.config["substrings"] for g in task.graders if g.name == "card_must_contain")
            text = str(calls[0].arguments["ui_configs"]) + calls[0].arguments["title"]
            assert not any(s.lower() in text.lower() for s in must)
        else:
            expected = next(g.config["expected_template_ids"] for g in task.graders if g.name == "card_template_choice")
            assert calls[0].arguments["ui_configs"][0]["template_id"] not in expected
