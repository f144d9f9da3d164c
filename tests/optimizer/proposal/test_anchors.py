"""Answers the prompt shows (`optimizer.proposal.anchors`): which literal is taken out, on what
evidence, and what replaces it."""

from __future__ import annotations

import pytest

from optimizer.errors import ConfigError
from optimizer.proposal.anchors import anchor_path, find, read_placeholder
from optimizer.proposal.patch import LintIndex, check_prompt_text
from optimizer.proposal.proposers import ExampleProposer, ProposalRequest
from optimizer.suites import load_suite
from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT

PKM_PROMPT = PROJECT_ROOT / "agents/prompts/pkm_agent.md"
SHOWN = "Areas/Health/running.md"  # an example path that is the answer of two train tasks


def shown_prompt() -> str:
    """The PKM prompt with `SHOWN` as its example path, as it once was (it now shows the
    placeholder itself)."""
    prompt = PKM_PROMPT.read_text(encoding="utf-8")
    assert prompt.count("`<folder>/<file>.md`") == 1, "the prompt's example path is where this test expects it"
    return prompt.replace("`<folder>/<file>.md`", f"`{SHOWN}`")


def pkm():
    suite = load_suite("pkm_agent", PROJECT_ROOT)
    return suite, LintIndex.from_suites([suite]), {task.id for task in suite.tasks}


def filed(task_id: str, bucket: str, got: str, expected: str, split: str = "train") -> Trial:
    """A failed trial whose routing grader names where the note went and where it belonged."""
    return Trial.model_validate({
        "suite": "pkm_agent", "task_id": task_id, "index": 0, "bucket": bucket, "split": split, "status": "failed",
        "grader_results": [{"grader": "pkm_routed_correctly", "score": 0.0, "passed": False,
                            "details": {"confusion": {"got": got, "expected": expected}}}]})


ONE_ON_ONE = ("pkm_route_one_on_one_secondment", "route_into_existing_file")


def test_the_prompts_example_path_is_taken_out_once_a_failed_note_of_a_target_was_filed_there():
    suite, index, tasks = pkm()
    prompt = shown_prompt()
    placeholder = read_placeholder(PKM_PROMPT)
    trial = filed(*ONE_ON_ONE, got="Areas/Health", expected="Areas/Work")
    [anchor] = find([trial], index, prompt, [("pkm_agent", ONE_ON_ONE[1])], tasks, placeholder)
    assert anchor.literal == SHOWN and anchor.chosen_by == (ONE_ON_ONE[0],)
    assert set(anchor.owners) == {"pkm_route_running_tempo_5k", "pkm_fresh_first_run_log"}
    patched = anchor.apply(prompt)
    assert SHOWN not in patched and "<folder>/<file>.md" in patched
    assert check_prompt_text(prompt_file="agents/prompts/pkm_agent.md", base_prompt=prompt, patched=patched,
                             max_changed_lines=10, index=index).passed
    assert SHOWN in anchor.rationale() and ONE_ON_ONE[0] in anchor.rationale()


@pytest.mark.parametrize("trial, targets, why", [
    (filed(*ONE_ON_ONE, got="Areas/Health", expected="Areas/Work"), [("pkm_agent", "create_in_right_bucket")],
     "the failed note is not of a targeted bucket"),
    (filed(*ONE_ON_ONE, got="Areas/Health", expected="Areas/Work", split="holdout"),
     [("pkm_agent", ONE_ON_ONE[1])], "holdout trials are never read"),
    (filed("pkm_subfile_meal_plan_week", "route_into_existing_subfile", got="Areas/Health",
           expected="Areas/Health/Nutrition"), [("pkm_agent", "route_into_existing_subfile")],
     "a near miss beside the literal (the expected folder lies under what the agent chose)"),
    (filed(*ONE_ON_ONE, got="Areas/Work/Other", expected="Areas/Work"), [("pkm_agent", ONE_ON_ONE[1])],
     "the agent chose another folder"),
])
def test_no_answer_is_taken_out_without_a_failed_target_note_that_chose_it(trial, targets, why):
    _, index, tasks = pkm()
    prompt = shown_prompt()
    assert find([trial], index, prompt, targets, tasks, read_placeholder(PKM_PROMPT)) == [], why


def test_an_agent_without_a_placeholder_or_a_literal_that_is_no_answer_gets_none():
    _, index, tasks = pkm()
    prompt = shown_prompt()
    trial = filed(*ONE_ON_ONE, got="Areas/Health", expected="Areas/Work")
    targets = [("pkm_agent", ONE_ON_ONE[1])]
    assert find([trial], index, prompt, targets, tasks, None) == [], "no placeholder file beside the prompt"
    assert find([trial], index, prompt.replace(SHOWN, "Areas/Health/cycling.md"), targets, tasks, "<x>") == [], \
        "an illustration that is no task's answer stays"
    assert find([trial], index, prompt, targets, set(), "<x>") == [], "another agent's answers are not its own"


def test_a_placeholder_file_without_one_line_is_refused_naming_it(tmp_path):
    prompt = tmp_path / "agent.md"
    prompt.write_text("# Agent\n", encoding="utf-8")
    assert read_placeholder(prompt) is None
    for text in ("placeholder:\n", "other: x\n", "placeholder: [a\n"):
        anchor_path(prompt).write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match="agent.anchor.yaml"):
            read_placeholder(prompt)


def test_the_example_proposer_makes_the_first_prepared_patch_and_asks_the_patcher_for_none(tmp_path):
    _, index, tasks = pkm()
    prompt = shown_prompt()
    [anchor] = find([filed(*ONE_ON_ONE, got="Areas/Health", expected="Areas/Work")], index, prompt,
                    [("pkm_agent", ONE_ON_ONE[1])], tasks, "<folder>/<file>{suffix}")
    (tmp_path / "prompt.md").write_text(prompt, encoding="utf-8")

    class Patcher:
        name, note, confined = "llm", "", True

        def propose(self, request):
            raise AssertionError("a prepared patch needs no patcher")

    proposal = ExampleProposer(Patcher()).propose(ProposalRequest(
        request="", request_path=tmp_path / "request.md", prompt_file="prompt.md", workdir=tmp_path, ordinal=7,
        prepared=[anchor]))
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == anchor.apply(prompt)
    assert proposal.rationale == anchor.rationale()
