"""Model providers behind one seam: an outside provider registered through the public hook
(`optimizer.register_provider`) serves its models through the same path as the built-in ones, and
the embedded engine is such a provider, which the generic model layer never imports: it is loaded
through its `optimizer.providers` entry point the first time a `local/` model is named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest

import optimizer
from optimizer.settings.loading import load_settings
from optimizer.errors import ModelConfigError
from optimizer.trials.evaluate import execute, prepare
from optimizer.store import open_store
from tests.conftest import PROJECT_ROOT
from tests.helpers import event_task, tool_call_reply, write_suite

CALLS: list[dict] = []
_lock = threading.Lock()


def _card_writer():
    """An outside model: it writes the task's reference card with the one tool it is offered."""
    from litellm import CustomLLM

    class CardWriter(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            with _lock:
                CALLS.append({"model": model, "tools": [tool["function"]["name"]
                                                        for tool in kwargs["optional_params"].get("tools") or []]})
            arguments = event_task()["reference_solution"]["tool_calls"][0]["arguments"]
            return tool_call_reply(model, "c1", "save_timeline_card", json.dumps(arguments))

    return CardWriter()


def _check(model: str, field: str) -> None:
    if model != "myprefix/writer":
        raise ModelConfigError(f"myprefix serves no {model!r}", field=field, fix="use myprefix/writer")


optimizer.register_provider("myprefix", optimizer.Provider(
    handler=_card_writer, models=("myprefix/writer",), check=_check, concurrency=lambda model: 1))


def test_an_outside_provider_registered_through_the_public_hook_serves_a_run(tmp_path):
    suite = write_suite(tmp_path / "suite", [event_task()])
    settings = load_settings(PROJECT_ROOT, {"agent_model": "myprefix/writer", "trials": 3, "concurrency": 8})
    store = open_store(settings, PROJECT_ROOT)
    plan = prepare(settings.evaluation, PROJECT_ROOT, [str(suite)])
    CALLS.clear()
    run, summary = execute(plan, store)
    assert [trial.status for trial in run.trials] == ["passed"] * 3
    assert CALLS and {call["model"] for call in CALLS} == {"writer"}, "litellm handed the call to its handler"
    assert summary["totals"]["cost_usd"] == 0.0, "a model of Provider.models is priced at zero"
    rerun, _ = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), store)
    assert len(CALLS) == 3 and all(trial.status == "passed" for trial in rerun.trials), \
        "the response cache answers a repeated run, as for any model"
    store.close()


def test_an_outside_providers_hooks_are_asked(tmp_path):
    from optimizer.models import check_model_string, concurrency_limit, is_embedded, validate_model

    with pytest.raises(ModelConfigError, match="myprefix serves no 'myprefix/reader'") as caught:
        load_settings(PROJECT_ROOT, {"judge_model": "myprefix/reader"})
    assert caught.value.field == "judge_model" and caught.value.fix == "use myprefix/writer"
    check_model_string("myprefix/writer")
    validate_model("myprefix/writer")  # no validate hook: nothing to install or start
    assert concurrency_limit("myprefix/writer") == 1 and not is_embedded("myprefix/writer")


def test_a_prefix_with_a_slash_is_refused():
    with pytest.raises(ModelConfigError, match="is not a provider prefix"):
        optimizer.register_provider("my/prefix", _card_writer)


def test_a_providers_configure_hook_is_handed_its_part_of_the_settings_alone():
    """`Provider.configure` gets `ProviderSettings` (the models, `concurrency`, `local_slots`), at
    every settings load and when it registers after one; not the loop's, gate's or proposer's."""
    handed: list = []
    optimizer.register_provider("sizing", optimizer.Provider(handler=_card_writer, configure=handed.append))
    handed.clear()  # handed the settings an earlier test loaded, at once
    load_settings(PROJECT_ROOT, {"agent_model": "mock/sim", "concurrency": 3, "local_slots": 2,
                                 "proposer_command": "agent {request}"})
    optimizer.register_provider("sizing2", optimizer.Provider(handler=_card_writer, configure=handed.append))
    assert len(handed) == 2 and handed[0] == handed[1]
    part = handed[0]
    assert isinstance(part, optimizer.ProviderSettings)
    assert (part.models.agent_model, part.concurrency, part.local_slots) == ("mock/sim", 3, 2)
    assert not hasattr(part, "proposer_command") and not hasattr(part, "gate_policy")


def _fresh(code: str, *, path: str | None = None) -> dict:
    """What `code` prints as JSON in a fresh interpreter (its `sys.path` led by `path`)."""
    prelude = f"import sys; sys.path.insert(0, {path!r})\n" if path else ""
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=PROJECT_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_generic_client_imports_no_engine_and_a_local_model_loads_it():
    found = _fresh("""
        import json, sys
        import optimizer.models.client
        from optimizer.models import ModelClient, check_model_string, concurrency_limit, validate_model
        check_model_string("mock/sim"); validate_model("mock/oracle@5ms"); concurrency_limit("mock/sim")
        ModelClient("mock/sim")
        before = sorted(name for name in sys.modules if name.startswith("optimizer.engines"))
        check_model_string("local/qwen2.5-coder-1.5b")
        after = sorted(name for name in sys.modules if name.startswith("optimizer.engines"))
        print(json.dumps({"before": before, "after": after}))
    """)
    assert found["before"] == [], "the model layer imported the engine"
    assert found["after"] == ["optimizer.engines", "optimizer.engines.llamacpp"], \
        "naming a local/ model loads the engine's registration alone (no server, install or litellm)"


def test_a_provider_declared_by_an_entry_point_loads_when_its_prefix_is_first_named(tmp_path):
    """An outside distribution needs no import by anyone: its entry point in `optimizer.providers`
    is enough, and its module is imported only once a model of its prefix is named."""
    (tmp_path / "echo_provider.py").write_text(textwrap.dedent("""
        import optimizer

        def _handler():
            from litellm import CustomLLM
            from litellm.types.utils import ModelResponse

            class Echo(CustomLLM):
                def completion(self, model, messages, *args, **kwargs):
                    return ModelResponse(model=model, choices=[{"message": {
                        "role": "assistant", "content": messages[-1]["content"]}, "finish_reason": "stop"}])
            return Echo()

        optimizer.register_provider("echo", optimizer.Provider(handler=_handler, models=("echo/plain",)))
    """))
    info = tmp_path / "echo_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[optimizer.providers]\necho = echo_provider\n")
    found = _fresh("""
        import json, sys
        from optimizer.models import ModelClient, check_model_string
        check_model_string("mock/sim")
        before = "echo_provider" in sys.modules
        reply = ModelClient("echo/plain").complete([{"role": "user", "content": "hello"}])
        print(json.dumps({"before": before, "content": reply.content, "cost": reply.usage.cost_usd}))
    """, path=str(tmp_path))
    assert found == {"before": False, "content": "hello", "cost": 0.0}


def test_an_entry_point_that_registers_nothing_is_a_configuration_error(tmp_path):
    (tmp_path / "silent_provider.py").write_text("")
    info = tmp_path / "silent_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: silent-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[optimizer.providers]\nsilent = silent_provider\n")
    found = _fresh("""
        import json
        from optimizer.errors import ModelConfigError
        from optimizer.models import check_model_string
        try:
            check_model_string("silent/x")
        except ModelConfigError as exc:
            print(json.dumps({"message": exc.message, "fix": exc.fix}))
    """, path=str(tmp_path))
    assert found["message"] == "silent_provider registered no provider for silent/..."
    assert "register_provider('silent'" in found["fix"]


def test_a_prefix_nobody_serves_says_which_and_how_a_provider_is_installed():
    from optimizer.models import check_model_string

    with pytest.raises(ModelConfigError, match="no provider is registered for 'nobody'") as caught:
        check_model_string("nobody/model-x", field="agent_model")
    assert caught.value.field == "agent_model" and "pip install -e ." in caught.value.fix
