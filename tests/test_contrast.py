"""The contrast request: short contrastive cases and one rule in a fixed form, for small patchers."""

from __future__ import annotations

import json

from optimizer.contrast import pieces
from optimizer.proposers import LLMProposer, ProposalRequest
from optimizer.request import Selection, Target, load_manual, render_request
from optimizer.weak_patcher import targeted_buckets
from tests.conftest import PROJECT_ROOT
from tests.helpers import git

PROMPT = "# Card agent\n\n- Save one card per note.\n"
SELECTION = Selection("card_agent", ["card_agent"], [Target(
    "card_agent", "template_quote", 3, 4, 0.4, (("event where quote was expected (card_template_choice)", 3),))])


def record(task_id: str, graders: list[dict], content: str = "mum said: measure twice, cut once") -> dict:
    return {"suite": "card_agent", "task_id": task_id, "bucket": "template_quote", "description": "a saying",
            "input": content, "trial_index": 0, "score": 0.3, "failed": 2, "trials": 2, "graders": graders,
            "ending": "", "workspace": "{\"card\": \"...\"}", "trace": "-> save_timeline_card({...})\n" * 40}


CONFUSED = {"grader": "card_template_choice", "passed": False, "errored": False, "score": 0.0,
            "rationale": "templates ['event'] include none of ['quote']",
            "details": {"confusion": {"got": "event", "expected": "quote"}}}
UNNAMED = {"grader": "card_must_contain", "passed": False, "errored": False, "score": 0.5,
           "rationale": "missing from the saved card: 'cut once'", "details": {"missing": ["cut once"]}}
PASSED = {"grader": "card_completion", "passed": True, "errored": False, "score": 1.0, "rationale": "ok", "details": {}}


def render(failures: list[dict], patch_format: str) -> str:
    return render_request(selection=SELECTION, failures=failures, prompt=PROMPT, prompt_file="prompt.md",
                          manual=load_manual(PROJECT_ROOT, "card_agent"), iteration_id="it", base_commit="0" * 40,
                          agent_model="mock/sim", max_changed_lines=3, token_budget=12_000,
                          patch_format=patch_format)[0]


def test_a_failure_becomes_a_case_of_what_the_agent_did_and_what_was_expected():
    cases = pieces([record("plain", [PASSED, UNNAMED]), record("confused", [PASSED, UNNAMED, CONFUSED])])
    assert cases[0] == {"input": "mum said: measure twice, cut once", "did": "event", "expected": "quote",
                        "words": "card_template_choice: templates ['event'] include none of ['quote']"}
    assert cases[1]["did"] == "see the grader" and cases[1]["words"].startswith("card_must_contain: missing")
    assert len(pieces([record(f"t{n}", [CONFUSED], "x " * 400) for n in range(10)])) == 6
    assert len(pieces([record("long", [CONFUSED], "word " * 400)])[0]["input"]) <= 240


def test_the_contrast_request_is_short_names_the_confusions_and_asks_for_one_rule_in_a_fixed_form():
    failures = [record(f"t{n}", [PASSED, CONFUSED]) for n in range(3)]
    contrast, full = render(failures, "contrast"), render(failures, "edits")
    assert "   Did: event\n   Expected: quote\n" in contrast
    assert "  - event where quote was expected (card_template_choice): 3 times" in contrast
    assert '"When <the kind of input, in general words>, <what to do> instead of <the mistake>."' in contrast
    assert "save_timeline_card" not in contrast, "no traces"
    assert len(contrast) * 4 < len(full), (len(contrast), len(full))
    assert targeted_buckets(contrast) == ["template_quote"], "the mock patchers find its target as in the full one"


def test_a_scripted_patcher_answers_the_contrast_request_with_one_rule_checked_like_any_rule(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "prompt.md").write_text(PROMPT)
    git(workdir, "init", "-q", "-b", "main")
    rule = "When the note repeats a saying someone said, choose the quote template instead of event."
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"rationale": "sayings become events", "rule": "First rule.\nSecond rule.",
                                   "after_feedback": {"rationale": "one rule", "rule": rule}}]))
    request = render([record("t0", [CONFUSED])], "contrast")
    proposal = LLMProposer("mock/patcher", script=str(script), patch_format="contrast").propose(ProposalRequest(
        request=request, request_path=tmp_path / "request.md", prompt_file="prompt.md", workdir=workdir, ordinal=1))
    assert proposal.error is None, proposal.error
    assert (workdir / "prompt.md").read_text() == PROMPT + "\n" + rule + "\n"
    assert "sent back: the answer gives 2 line(s)" in proposal.log


def test_the_contrast_patcher_is_instructed_from_the_prompt_manual():
    from optimizer.contrast import instructions
    from optimizer.patch_signature import signature

    asked = signature("contrast")
    assert asked.instructions == instructions().strip() and list(asked.output_fields) == ["rationale", "rule"]
