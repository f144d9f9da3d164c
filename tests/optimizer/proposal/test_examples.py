"""Worked examples (`optimizer.proposal.examples`): which example a target gets, and the hard-coding lint
telling an example (a task shown whole, left out of the gate) from a copied answer."""

from __future__ import annotations

from pathlib import Path

from optimizer.proposal.examples import choose, render, template_path
from optimizer.proposal.patch import LintIndex, lint
from optimizer.suites import load_suite
from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT

CARD_PROMPT = PROJECT_ROOT / "agents/prompts/card_agent.md"
TEMPLATE = template_path(CARD_PROMPT).read_text(encoding="utf-8")


def card_suite():
    return load_suite("card_agent", PROJECT_ROOT)


def task(suite, task_id):
    return next(t for t in suite.tasks if t.id == task_id)


def baseline_trial(task_id: str, status: str, bucket: str) -> Trial:
    return Trial.model_validate({"suite": "card_agent", "task_id": task_id, "index": 0, "bucket": bucket,
                                 "split": "train", "status": status, "prompt_sha256": "0" * 64})


def test_an_example_shows_the_note_and_its_reference_call_in_the_agents_wording():
    quote = task(card_suite(), "card_quote_grandma_rice")
    text = render(TEMPLATE, quote)
    assert quote.input.content in text and '"template_id": "quote"' in text
    assert text.startswith(TEMPLATE.split("{note}")[0].strip("\n"))
    assert "{note}" not in text and "{calls}" not in text


def test_the_task_the_baseline_passed_is_shown_and_the_failing_one_stays_as_evidence():
    suite = card_suite()
    bucket = "template_quote"
    ids = sorted(t.id for t in suite.tasks if t.bucket == bucket and t.split == "train")
    assert len(ids) == 2
    for passing, failing in (ids, ids[::-1]):
        baseline = [baseline_trial(passing, "passed", bucket), baseline_trial(failing, "failed", bucket)]
        chosen = choose([suite], [("card_agent", bucket)], baseline, CARD_PROMPT.read_text(), TEMPLATE)
        assert [example.task_ids[0] for example in chosen][0] == passing


def test_a_bucket_keeps_one_unshown_train_task_and_one_task_buckets_get_no_example():
    suite = card_suite()
    prompt = CARD_PROMPT.read_text()
    single = [t.bucket for t in suite.tasks if t.split == "train"]
    lone = next(bucket for bucket in single if single.count(bucket) == 1)
    assert choose([suite], [("card_agent", lone)], [], prompt, TEMPLATE) == []
    first = choose([suite], [("card_agent", "template_quote")], [], prompt, TEMPLATE)
    assert len(first) == 2  # either may be shown while the other stays
    shown_once = prompt + "\n\n" + first[0].text
    assert choose([suite], [("card_agent", "template_quote")], [], shown_once, TEMPLATE) == []


def test_the_lint_lets_a_whole_note_through_as_an_example_and_refuses_a_fragment_of_it():
    suite = card_suite()
    index = LintIndex.from_suites([suite])
    quote = task(suite, "card_quote_grandma_rice")
    prompt = CARD_PROMPT.read_text()
    example = render(TEMPLATE, quote)
    check = lint(prompt, example, index)
    assert check.passed, check.reason
    assert "worked examples of card_quote_grandma_rice" in check.reason
    words = quote.input.content.split()
    fragment = f"- When a note says something like \"{' '.join(words[2:8])}\", use the quote template."
    refused = lint(prompt, fragment, index)
    assert not refused.passed and "eval input words" in refused.reason


def test_an_example_whose_answer_is_another_tasks_answer_is_refused_and_never_chosen(tmp_path):
    pkm = load_suite("pkm_agent", PROJECT_ROOT)
    index = LintIndex.from_suites([pkm])
    prompt = (PROJECT_ROOT / "agents/prompts/pkm_agent.md").read_text()
    template = template_path(PROJECT_ROOT / "agents/prompts/pkm_agent.md").read_text()
    refused = []
    for candidate in pkm.tasks:
        if candidate.reference_solution and candidate.reference_solution.tool_calls and candidate.split == "train":
            check = lint(prompt, render(template, candidate), index)
            if not check.passed and "expected file path" in check.reason:
                refused.append(candidate)
    assert refused, "no PKM task shares an expected path with another: this test has nothing to show"
    for candidate in refused:
        chosen = choose([pkm], [("pkm_agent", candidate.bucket)], [], prompt, template)
        assert candidate.id not in {task_id for example in chosen for task_id in example.task_ids}


def test_a_shown_task_is_found_however_the_prompt_wraps_the_note():
    suite = card_suite()
    index = LintIndex.from_suites([suite])
    content = task(suite, "card_quote_grandma_rice").input.content
    wrapped = "Note:\n   " + content.replace(" ", "\n  ", 3).upper()
    assert "card_quote_grandma_rice" in index.shown(wrapped)
    assert "card_quote_grandma_rice" not in index.shown(content[: len(content) // 2])


def test_the_targets_example_comes_with_companions_of_other_buckets_the_baseline_passed():
    """One example alone pulls a small model toward its label; a proposal shows the target's
    first and one of each of `COMPANIONS` other buckets, those whose example the baseline passed
    most often first, each bucket keeping a train task unshown."""
    from optimizer.proposal.examples import COMPANIONS

    suite = card_suite()
    prompt = CARD_PROMPT.read_text()
    train = [t for t in suite.tasks if t.split == "train"]
    eligible = sorted({t.bucket for t in train if sum(o.bucket == t.bucket for o in train) >= 2} - {"template_quote"})
    assert len(eligible) > COMPANIONS
    favoured = eligible[-COMPANIONS:]  # last by name: only the baseline's passes can put them first
    baseline = [baseline_trial(t.id, "passed" if t.bucket in favoured else "failed", t.bucket) for t in train]
    (first, *_) = choose([suite], [("card_agent", "template_quote")], baseline, prompt, TEMPLATE)
    buckets = [task(suite, task_id).bucket for task_id in first.task_ids]
    assert buckets[0] == "template_quote" and sorted(buckets[1:]) == favoured
    assert first.text.index(task(suite, first.task_ids[0]).input.content) < \
        first.text.index(task(suite, first.task_ids[1]).input.content)
    index = LintIndex.from_suites([suite])
    assert index.shown(prompt + "\n\n" + first.text) == set(first.task_ids)
    for bucket in buckets:
        assert [t for t in train if t.bucket == bucket and t.id not in first.task_ids], bucket


def test_a_prompt_whose_examples_span_enough_buckets_gets_the_targets_example_alone():
    suite = card_suite()
    prompt = CARD_PROMPT.read_text()
    (first, *_) = choose([suite], [("card_agent", "template_quote")], [], prompt, TEMPLATE)
    shown = prompt + "\n\n" + first.text
    other = next(t.bucket for t in suite.tasks if t.split == "train" and t.id not in first.task_ids
                 and t.bucket != "template_quote" and choose([suite], [("card_agent", t.bucket)], [], shown, TEMPLATE))
    (second, *_) = choose([suite], [("card_agent", other)], [], shown, TEMPLATE)
    assert len(second.task_ids) == 1 and task(suite, second.task_ids[0]).bucket == other
