"""Card graders on hand-made outcomes, produced by the real save tool."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from prompt_optimizer_agents.card.agent import CardFile, card_state
from prompt_optimizer_agents.card.tool import CardSaver
from prompt_optimizer_graders.card import (MustContainConfig, TagsConfig, TemplateChoiceConfig, card_completion,
                                           card_must_contain, card_tags, card_template_choice)
from optimizer import Outcome, Task, Trial

FACT_ID = "2026/05/25.md#ts_2"
TASK = Task.model_validate({"id": "t", "graders": [{"name": "card_completion"}], "input": {"fact_id": FACT_ID}})


def saved_trial(tmp_path, **arguments) -> Trial:
    saver = CardSaver(tmp_path, FACT_ID, datetime(2026, 5, 25, 9, tzinfo=timezone.utc))
    call = {"fact_id": FACT_ID, "title": "Standup", "ui_configs": [{"template_id": "event", "data": {}}], **arguments}
    saver.save(call)
    return Trial(suite="s", task_id="t", bucket="b", split="train", index=0, status="failed",
                 outcome=Outcome(environment_state=card_state(CardFile(tmp_path, FACT_ID), saver.errors)))


def test_completion_is_full_for_a_saved_card(tmp_path):
    result = card_completion(TASK, saved_trial(tmp_path), None)
    assert (result.score, result.passed) == (1.0, True)


def test_completion_names_the_failed_checks_when_nothing_was_saved(tmp_path):
    result = card_completion(TASK, saved_trial(tmp_path, title=""), None)
    assert result.score == 0.0 and not result.passed
    assert result.rationale == ("5 of 5 checks not met: 'save succeeded', 'status completed', 'title present', "
                                "'at least one ui_config', 'fact_id matches input'")


def test_template_choice_full_credit_for_acceptable_primary(tmp_path):
    result = card_template_choice(TASK, saved_trial(tmp_path), TemplateChoiceConfig(expected_template_ids=["event", "task"]))
    assert (result.score, result.passed) == (1.0, True)


def test_template_choice_gives_half_credit_when_acceptable_template_is_secondary(tmp_path):
    trial = saved_trial(tmp_path, ui_configs=[{"template_id": "task", "data": {}}, {"template_id": "event", "data": {}}])
    result = card_template_choice(TASK, trial, TemplateChoiceConfig(expected_template_ids=["event"]))
    assert (result.score, result.passed) == (0.5, True)
    strict = card_template_choice(TASK, trial, TemplateChoiceConfig(expected_template_ids=["event"], min_score=0.75))
    assert not strict.passed


def test_template_choice_zero_when_no_acceptable_template(tmp_path):
    result = card_template_choice(TASK, saved_trial(tmp_path), TemplateChoiceConfig(expected_template_ids=["mood"]))
    assert (result.score, result.passed) == (0.0, False)


def test_must_contain_is_case_insensitive_by_default_and_reads_data_fields(tmp_path):
    trial = saved_trial(tmp_path, ui_configs=[{"template_id": "event", "data": {"medium": "Zoom", "at": "10:30"}}])
    assert card_must_contain(TASK, trial, MustContainConfig(substrings=["zoom", "10:30"])).passed
    strict = card_must_contain(TASK, trial, MustContainConfig(substrings=["zoom", "10:30"], case_sensitive=True))
    assert strict.score == 0.5 and "'zoom'" in strict.rationale


def test_must_contain_keeps_unicode_and_long_titles_unfolded(tmp_path):
    title = "Abendessen mit Jürgen 🍝 " + "sehr lange Notiz " * 12
    trial = saved_trial(tmp_path, title=title)
    assert card_must_contain(TASK, trial, MustContainConfig(substrings=["Jürgen 🍝", title.strip()])).passed


def test_tags_score_is_the_share_found(tmp_path):
    trial = saved_trial(tmp_path, tags=["Health"])
    result = card_tags(TASK, trial, TagsConfig(expected_tags=["Health", "Trip"]))
    assert result.score == 0.5 and "Trip" in result.rationale


@pytest.mark.parametrize("config", [{"expected_template_ids": "event"}, {"expected_template_ids": []},
                                    {"expected_template_ids": ["event"], "colour": "red"}])
def test_bad_template_choice_configs_are_rejected(config):
    with pytest.raises(ValidationError):
        TemplateChoiceConfig.model_validate(config)


@pytest.mark.parametrize("arguments, problem", [
    ({"ui_configs": [{"template_id": "calendar", "data": {}}]}, "not one of"),
    ({"title": "  "}, "title"),
    ({"fact_id": "2026/05/25.md#ts_1"}, "fact_id mismatch"),
    ({"tags": ["Work"]}, "tags"),
    ({"ui_configs": []}, "ui_configs"),
])
def test_save_tool_rejects_invalid_arguments_without_writing(tmp_path, arguments, problem):
    saver = CardSaver(tmp_path, FACT_ID, datetime(2026, 5, 25, 9, tzinfo=timezone.utc))
    output = saver.save({"fact_id": FACT_ID, "title": "ok", "ui_configs": [{"template_id": "event", "data": {}}],
                         **arguments})
    assert output.is_error and problem in output.text
    assert not (tmp_path / "Cards").exists()


def test_saved_card_yaml_has_the_documented_fields(tmp_path):
    import yaml

    saved_trial(tmp_path, tags=["Project"], address="Room 4")
    card = yaml.safe_load((tmp_path / "Cards/2026/05/25_ts_2.yaml").read_text())
    assert {"fact_id", "timestamp", "status", "tags", "ui_configs", "title", "address", "insight"} <= set(card)
    assert card["status"] == "completed" and card["fact_id"] == FACT_ID


def test_the_card_the_agent_remembers_is_the_card_a_fresh_read_parses(tmp_path):
    """The card file skips parsing a card the save tool just wrote; that is sound only while safe
    YAML loads back exactly what was dumped, for the awkward values a model sends too."""
    data = {"start_time": "10:30", "answer": "no", "on": "yes", "count": 7, "ratio": 0.5, "big": 1e21,
            "flag": True, "none": None, "date": "2026-05-25", "octal": "0755", "emoji": "🙂 fine",
            "quote": "she said: \"it's #1\"", "multiline": "line one\nline two", "nested": [{"a": [1, "2"]}]}
    remembered = CardFile(tmp_path, FACT_ID)
    saver = CardSaver(tmp_path, FACT_ID, datetime(2026, 5, 25, 9, tzinfo=timezone.utc), on_save=remembered.written)
    saver.save({"fact_id": FACT_ID, "title": "  Ümlaut: café  ", "tags": ["Project"],
                "ui_configs": [{"template_id": "event", "data": data}]})
    raw, card = remembered.read()
    assert (raw, card) == CardFile(tmp_path, FACT_ID).read()
    assert card["ui_configs"][0]["data"] == data and card["title"] == "Ümlaut: café"


class ScriptedModel:
    """Stands in for the agent's model client: answers from a list and keeps every request."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []

    def complete(self, messages, tools, **params):
        from optimizer.models.client import Completion
        from optimizer.types import Usage

        self.requests.append([dict(message) for message in messages])
        return self.replies.pop(0) if self.replies else Completion(content="done", tool_calls=[], usage=Usage())


def test_the_agent_is_reminded_with_the_checks_wording_until_it_saves(tmp_path):
    import time

    from prompt_optimizer_agents.card.agent import run as run_card_agent
    from prompt_optimizer_agents.texts import reminder, texts
    from optimizer import AgentContext
    from optimizer.models.client import Completion, ToolCallRequest
    from optimizer.types import Usage

    save = ToolCallRequest(id="c1", name="save_timeline_card", arguments={
        "fact_id": FACT_ID, "title": "Standup", "ui_configs": [{"template_id": "event", "data": {}}]})
    model = ScriptedModel([Completion(content="I would file it as an event.", tool_calls=[], usage=Usage()),
                           Completion(content=None, tool_calls=[save], usage=Usage())])
    context = AgentContext(task=TASK, workspace=tmp_path, system_prompt="prompt", model=model, trial_index=0,
                           deadline=time.monotonic() + 60)
    run = run_card_agent(context)
    assert len(model.requests) == 2
    nudge = model.requests[1][-1]
    assert nudge == {"role": "user", "content": reminder("card_agent.reminder.md",
                                                         [texts("card_agent.checks.yaml")["no_card"]])}
    assert "save_timeline_card" in nudge["content"]  # the check's wording, read from the prompts folder
    assert run.outcome.environment_state["is_complete"] is True
