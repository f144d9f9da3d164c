"""The embedded model's shared server, with a stand-in `llama-server` (tests/optimizer/engines/fake_llama_server.py):
one server per machine and slot count shared by processes, stopped with its last user (kill -9
included), restarted when it dies with the cut call sent again, deadlines, and replies turned
into tool calls."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from optimizer.errors import ModelConfigError
from optimizer.engines import llamacpp
from optimizer.engines.llamacpp import install, served, server
from optimizer.procfs import stat_fields
from tests.conftest import PROJECT_ROOT

FAKE = Path(__file__).with_name("fake_llama_server.py")
SPEC = server.ServerSpec(slots=2, slot_context=512, threads=1)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A model folder of our own whose `llama-server` is the stand-in; yields the calls log."""
    monkeypatch.setenv(install.MODEL_DIR_ENV, str(tmp_path / "models"))
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(log))
    _binary(f'exec {sys.executable} {FAKE} "$@"')
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(install, "require_ready", lambda field="agent_model": gguf)
    monkeypatch.setattr(served, "_model", served.ServedModel())
    monkeypatch.setattr(llamacpp, "spec", lambda: SPEC)
    yield log
    server.release(SPEC)
    _wait_for(lambda: not server.running(), what="the supervisor to stop")


def _binary(script: str) -> None:
    binary = install.server_binary()
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(f"#!/bin/sh\n{script}\n")
    binary.chmod(0o755)


def _wait_for(condition, *, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _other_process(code: str, *, wait: bool = True) -> subprocess.Popen:
    """A second optimizer process with the same model folder, holding the server while it runs."""
    prelude = textwrap.dedent(f"""
        import sys, time
        from optimizer.engines.llamacpp import install, server
        install.require_ready = lambda field='agent_model': None
        spec = server.ServerSpec(slots={SPEC.slots}, slot_context={SPEC.slot_context}, threads={SPEC.threads})
    """)
    process = subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)], stdout=subprocess.PIPE,
                               text=True, cwd=PROJECT_ROOT)
    if wait:
        process.wait(timeout=30)
    return process


def test_one_server_is_shared_by_processes_and_stops_with_its_last_user(fake):
    url = server.endpoint(SPEC)
    assert server.healthy(url)
    other = _other_process("print(server.endpoint(spec))")
    assert other.stdout.read().strip() == url, "a second process finds the running server"
    assert len(server.running()) == 1
    # a user killed with SIGKILL lets go too: only the kernel's lock counts users
    holder = _other_process("print(server.endpoint(spec), flush=True); time.sleep(60)", wait=False)
    assert holder.stdout.readline().strip() == url
    server.release(SPEC)
    time.sleep(3 * server.POLL_S)
    assert server.healthy(url), "the killed-to-be process still uses it"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    _wait_for(lambda: server.read_state(SPEC) is None, what="the server to stop after its last user")
    assert not server.healthy(url, timeout=0.5)


def test_a_killed_server_is_restarted_and_the_cut_call_sent_again(fake):
    server.endpoint(SPEC)
    first = server.read_state(SPEC)
    os.kill(first["server_pid"], signal.SIGKILL)
    reply = served._model.complete([{"role": "user", "content": "hello"}])
    assert reply.message == {"role": "assistant", "content": '{"final": "ok"}'}
    _wait_for(lambda: server.read_state(SPEC)["restarts"] == 1, what="the restart to be recorded")
    state = server.read_state(SPEC)
    assert state["server_pid"] != first["server_pid"]
    assert state["pid"] == first["pid"], "the same supervisor restarted it"


def test_a_reply_under_tools_is_a_tool_call_and_usage_is_the_servers(fake, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_REPLY", '{"name": "skip", "arguments": {"why": "a greeting"}}')
    tools = [{"type": "function", "function": {"name": "skip", "parameters": {
        "type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]}}}]
    reply = served._model.complete([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
                                  tools=tools, tool_choice="required")
    call = reply.message["tool_calls"][0]
    assert reply.finish_reason == "tool_calls"
    assert call["function"] == {"name": "skip", "arguments": json.dumps({"why": "a greeting"})}
    assert reply.cached_tokens == 3 and reply.prompt_tokens > 0 and reply.completion_tokens > 0
    port, length = fake.read_text().split()
    assert int(length) > len("be brief hi"), "the prompt carries the tools and the reply note"


def test_a_deadline_while_generating_stops_the_reply(fake, monkeypatch):
    from litellm.exceptions import Timeout

    monkeypatch.setenv("FAKE_LLAMA_REPLY", '{"final": "' + "x" * 200 + '"}')
    monkeypatch.setenv("FAKE_LLAMA_DELAY", "0.05")
    server.endpoint(SPEC)
    started = time.monotonic()
    with pytest.raises(Timeout, match=served.GENERATING_AT_DEADLINE):
        served._model.complete([{"role": "user", "content": "go on"}], deadline=time.monotonic() + 0.5)
    assert time.monotonic() - started < 2.0, "the stream is closed at the deadline, not read to its end"


def test_an_error_the_server_streams_is_its_own_not_a_lost_server(fake, monkeypatch):
    from litellm.exceptions import APIError

    monkeypatch.setenv("FAKE_LLAMA_ERROR", "failed to sample a token")
    with pytest.raises(APIError, match="failed to sample a token") as caught:
        served._model.complete([{"role": "user", "content": "hello"}])
    assert caught.value.status_code == 500
    assert len(fake.read_text().splitlines()) == 1, "a server that answered is not sent the call again"


def test_a_long_log_is_set_aside_when_the_next_server_starts(fake, monkeypatch):
    monkeypatch.setattr(server, "LOG_KEEP_BYTES", 100)
    server.serve_dir().mkdir(parents=True, exist_ok=True)
    server.log_path(SPEC).write_text("old line\n" * 50)
    server.endpoint(SPEC)
    assert server.log_path(SPEC).with_name(server.log_path(SPEC).name + ".1").read_text().count("old line") == 50
    assert "old line" not in server.log_path(SPEC).read_text()


def test_a_server_that_does_not_come_up_is_reported_with_its_log(fake, monkeypatch):
    _binary('echo "error: unknown argument --no-such-flag" >&2; exit 1')
    monkeypatch.setattr(server, "READY_TIMEOUT_S", 10.0)
    with pytest.raises(ModelConfigError) as caught:
        server.endpoint(SPEC)
    assert "did not come up" in str(caught.value) and "unknown argument" in str(caught.value)
    assert Path(caught.value.path) == server.log_path(SPEC)


def test_a_state_file_whose_pid_now_names_another_process_is_stale():
    """After a reboot (or a kill -9 of the supervisor and pid reuse) the pid in a state file may
    run something else: the recorded start time tells it from the supervisor that wrote it."""
    started = stat_fields(os.getpid())[19]
    assert server._supervisor_alive({"pid": os.getpid(), "started": started})
    assert not server._supervisor_alive({"pid": os.getpid(), "started": str(int(started) + 1)})
    assert server._supervisor_alive({"pid": os.getpid()}), "a state file of before this field is taken at its word"


def test_a_card_trial_on_a_server_too_slow_to_finish_one_reply_is_errored_as_the_infrastructures(fake, monkeypatch,
                                                                                                 tmp_path):
    """A busy machine: the first reply is still streaming at the deadline. Not the agent's failure."""
    from optimizer.settings.loading import load_settings
    from optimizer.trials.evaluate import execute, prepare
    from optimizer.store import open_store
    from tests.helpers import event_task, write_suite

    monkeypatch.setenv("FAKE_LLAMA_REPLY", '{"final": "' + "x" * 200 + '"}')
    monkeypatch.setenv("FAKE_LLAMA_DELAY", "0.05")
    suite = write_suite(tmp_path / "suite", [event_task("slow", timeout_seconds=1)])
    settings = load_settings(PROJECT_ROOT, {"agent_model": llamacpp.MODEL, "cache": False})
    run, summary = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), open_store(settings, PROJECT_ROOT))
    trial = run.trials[0]
    assert (trial.status, trial.score) == ("errored", None), trial.error
    assert trial.error.startswith(f"infrastructure: no call to {llamacpp.MODEL} completed in "), trial.error
    assert summary["totals"]["errored"] == 1


@pytest.mark.parametrize("cores, generating, reading", [(1, 1, 1), (2, 1, 2), (4, 3, 4), (8, 7, 8)])
def test_the_server_generates_on_all_cores_but_one(monkeypatch, cores, generating, reading):
    """A core left over keeps one other busy process from stalling every generated token."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    command = llamacpp.spec().command(Path("llama-server"), Path("model.gguf"), 8080)
    assert command[command.index("--threads") + 1] == str(generating)
    assert command[command.index("--threads-batch") + 1] == str(reading)


def test_local_threads_sets_the_generating_threads_and_tells_the_server_apart(monkeypatch):
    """`local_threads` (through the provider's configure hook) overrides the default; a server
    with other threads is another server (its own state file), never one found running."""
    from optimizer.settings.loading import load_settings

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    default = llamacpp.spec()
    try:
        load_settings(PROJECT_ROOT, {"agent_model": "mock/sim", "local_threads": 2})  # configures the providers
        chosen = llamacpp.spec()
    finally:
        load_settings(PROJECT_ROOT, {"agent_model": "mock/sim"})
    command = chosen.command(Path("llama-server"), Path("model.gguf"), 8080)
    assert (default.threads, chosen.threads) == (1, 2)
    assert command[command.index("--threads") + 1] == "2" and command[command.index("--threads-batch") + 1] == "2"
    assert default.key != chosen.key and server.state_path(default) != server.state_path(chosen)
    assert llamacpp.spec() == default
