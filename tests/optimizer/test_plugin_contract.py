"""The plugin contract as the built-in agents and graders use it: typed outcomes stored as the same
JSON as before, checked when the run ends; a grader's name stated once; answer-key marks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from optimizer import AgentRun, GraderResult, Outcome, Transcript, agent, grader
from optimizer import registry
from optimizer.provenance import agent_spec
from optimizer.registry import get_agent, get_grader
from prompt_optimizer_outcomes.card import CardOutcome
from prompt_optimizer_outcomes.pkm import PKMOutcome

STORED_CARD = (
    '{"environment_state":{"saved":true,"card_path":"Cards/2026/02/05_ts_1.yaml","is_complete":true,'
    '"status":"completed","title":"🙂","fact_id":"2026/02/05.md#ts_1","expected_fact_id":"2026/02/05.md#ts_1",'
    '"template_ids":["compact"],"card_tags":[],"raw_yaml":"fact_id: 2026/02/05.md#ts_1\\nstatus: completed\\n",'
    '"save_errors":[]}}')
"""A card trial's outcome as the store held it before the agents had typed outcomes."""

STORED_PKM = {
    "fact_id": "2026/05/25.md#ts_1", "marker": "<!-- fact_id: 2026/05/25.md#ts_1 -->",
    "tree": [{"path": "Areas/Health/running.md", "lines": 4}], "created": ["Areas/new.md"],
    "modified": ["Areas/Health/running.md"], "deleted": ["Inbox/old.md"], "moves": [["Inbox/old.md", "Areas/new.md"]],
    "events": [{"op": "read", "path": "Areas/Health/running.md", "origin": "Areas/Health/running.md"},
               {"op": "edit", "path": "Areas/Health/running.md", "origin": "Areas/Health/running.md",
                "replacements": 1},
               {"op": "move", "path": "Areas/new.md", "origin": "Inbox/old.md", "src": "Inbox/old.md"},
               {"op": "write", "path": "Areas/new.md", "origin": "Inbox/old.md", "existed": True}],
    "files": {"Areas/Health/running.md": {"before": "# Running\n", "after": "# Running\n- 8 km\n"},
              "Inbox/old.md": {"before": "x\n", "after": None}},
    "markers_before": [], "markers_after": {"2026/05/25.md#ts_1": ["Areas/Health/running.md"]},
    "filed_in": ["Areas/Health/running.md"], "diff": "--- a/x\n+++ b/x\n",
    "insight": {"fact_id": "2026/05/25.md#ts_1", "text": "Faster.", "related_fact_ids": []},
    "skipped": False, "skip_evidence": None, "mutated": True, "reminders": []}
"""A PKM trial's outcome in the form the store holds, with an event of every kind."""


@pytest.fixture
def scratch_registry(monkeypatch):
    """Agents and graders registered by a test are gone after it."""
    registry.load_plugins()
    monkeypatch.setattr(registry, "_agents", dict(registry._agents))
    monkeypatch.setattr(registry, "_graders", dict(registry._graders))


def test_a_stored_card_outcome_reads_typed_and_dumps_to_the_same_json():
    outcome = Outcome.model_validate_json(STORED_CARD)
    card = outcome.read(CardOutcome)
    assert card.template_ids == ["compact"] and card.saved
    assert Outcome(environment_state=card).model_dump_json() == STORED_CARD


def test_a_stored_pkm_outcome_round_trips_exactly():
    state = Outcome(environment_state=STORED_PKM).read(PKMOutcome)
    assert state.files["Inbox/old.md"].after is None and state.events[2]["src"] == "Inbox/old.md"
    assert json.dumps(Outcome(environment_state=state).environment_state) == json.dumps(STORED_PKM)


def test_an_outcome_that_breaks_the_declared_model_stops_at_the_end_of_the_run(scratch_registry):
    @agent("test_typed_outcome_agent", prompt_file="agents/prompts/card_agent.md", outcome=CardOutcome)
    def run(context):
        return AgentRun(transcript=Transcript(), outcome=Outcome(environment_state={"saved": True, "colour": "red"}))

    with pytest.raises(ValidationError, match="colour"):
        get_agent("test_typed_outcome_agent").run(None)
    assert run(None).outcome.environment_state["colour"] == "red", "the function itself is left as written"


def test_a_graders_name_is_stated_once(scratch_registry):
    @grader(agent="card_agent")
    def test_named_after_its_function(task, trial, config):
        return GraderResult(score=1.0, passed=True)

    assert get_grader("test_named_after_its_function").func(None, None, None).grader == \
        "test_named_after_its_function"
    assert test_named_after_its_function(None, None, None).grader == "test_named_after_its_function"


def test_answer_keys_are_read_from_the_marked_config_fields():
    keys = get_grader("card_must_contain").answer_keys({"substrings": ["zoom", "5"], "case_sensitive": True})
    assert [(mark.label, text) for mark, text in keys] == [("graded substring", "zoom")]
    routed = get_grader("pkm_routed_correctly").answer_keys({"expected_buckets": ["Areas/"],
                                                             "expected_files": ["Areas/Health/Sleep.md"]})
    assert [(mark.label, text) for mark, text in routed] == [("expected file path", "Areas/Health/Sleep.md")]
    assert get_grader("card_tags").answer_keys({"expected_tags": ["Health"]}) == []


def test_an_edit_to_an_agents_outcome_is_an_edit_to_the_agent(tmp_path, monkeypatch):
    """The outcome module lives outside the agent's package; a baseline must still not outlive it."""
    entry = get_agent("card_agent")
    before = agent_spec(entry, "prompt").code
    module = sys.modules["prompt_optimizer_outcomes.card"]
    copy = tmp_path / "card.py"
    copy.write_text(Path(module.__file__).read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    monkeypatch.setattr(module, "__file__", str(copy))
    assert agent_spec(entry, "prompt").code != before
