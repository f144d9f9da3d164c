"""Builders shared by tests: small suites written to a temporary folder, the throw-away project
repository `optimizer run` branches from, and the scripted proposals its tests send."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def event_task(task_id: str = "card_event_standup", **overrides: Any) -> dict[str, Any]:
    task = {
        "id": task_id,
        "description": "A meeting with a time becomes an event card.",
        "metadata": {"failure_bucket": "template_event", "split": "train"},
        "input": {"fact_id": "2026/05/25.md#ts_1", "content": "Standup with the eval team Thursday 10:30am, Zoom."},
        "reference_solution": {"source": "manual", "tool_calls": [{"name": "save_timeline_card", "arguments": {
            "fact_id": "2026/05/25.md#ts_1", "title": "Eval team standup",
            "ui_configs": [{"template_id": "event", "data": {"start_time": "Thursday 10:30", "medium": "Zoom"}}]}}]},
        "graders": [{"name": "card_completion"},
                    {"name": "card_template_choice", "config": {"expected_template_ids": ["event"]}},
                    {"name": "card_must_contain", "config": {"substrings": ["10:30", "zoom"]}}],
    }
    task.update(overrides)
    return task


def write_suite(root: Path, tasks: list[dict[str, Any]] | dict[str, Any], name: str = "tmp_suite",
                **suite_fields: Any) -> Path:
    """Write suite.json and tasks (a list -> tasks/<id>.json; a dict maps relative paths to content)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "suite.json").write_text(json.dumps({"name": name, "agent_name": "card_agent", **suite_fields}))
    files = tasks if isinstance(tasks, dict) else {f"tasks/{t['id']}.json": t for t in tasks}
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return root


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def project_repo(root: Path, extra_files: dict[str, str] | None = None, suite: str = "card_agent") -> Path:
    """A throw-away git repository holding a copy of one suite (the card suite unless named),
    the prompts and manual (one commit on main), for `optimizer run` to branch from; `extra_files`
    are written after the project's own `pyproject.toml` (and may replace it)."""
    for folder in (f"suites/{suite}", "agents/prompts", "prompt_manual", "fixtures"):
        shutil.copytree(PROJECT_ROOT / folder, root / folder)
    (root / "pyproject.toml").write_text("[tool.optimizer]\nconcurrency = 8\n")
    for relative, text in (extra_files or {}).items():
        (root / relative).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Test User")
    git(root, "config", "user.email", "test@example.com")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "initial")
    return root


# The card prompt's `data` line and the rules the scripted proposals add after it: FACT_RULE raises
# the failing bucket on mock/sim, LINK_HARM harms another one.
PROMPT = "agents/prompts/card_agent.md"
DATA_LINE = "- data: fill the template's fields from the note itself; do not invent details."
FACT_RULE = "- Keep times, URLs, amounts and names exactly as written in the note, because the user searches for them later."
LINK_HARM = "- Never use link for a web page unless the note asks for it."


def script(tmp_path: Path, monkeypatch, *proposals: dict) -> Path:
    path = tmp_path / "proposals.json"
    path.write_text(json.dumps(list(proposals)))
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SCRIPT", str(path))
    return path


def after_data_line(*lines: str) -> dict:
    return {"rationale": "Facts were paraphrased away.",
            "edits": [{"search": DATA_LINE, "replace": "\n".join([DATA_LINE, *lines])}]}


def snapshot(root: Path) -> dict:
    """Everything of the user's checkout the loop must leave alone."""
    files = {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*"))
             if path.is_file() and ".git" not in path.relative_to(root).parts}
    return {"files": files, "index": (root / ".git" / "index").read_bytes(),
            "head": (root / ".git" / "HEAD").read_text(), "status": git(root, "status", "--porcelain"),
            "commit": git(root, "rev-parse", "HEAD")}


def optimizer_branches(root: Path) -> list[str]:
    return [line.strip(" *") for line in git(root, "branch", "--list", "optimizer/*").splitlines()]


def tool_call_reply(model: str, call_id: str, name: str, arguments: str) -> Any:
    """A litellm response whose message is one call of `name` with `arguments` (JSON text, or
    anything a scripted model wants to send), for test providers that play a model."""
    from litellm.types.utils import ModelResponse

    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return ModelResponse(model=model, choices=[{"message": {"role": "assistant", "content": None, "tool_calls": [call]},
                                                "finish_reason": "tool_calls"}],
                         usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})


def sent_tools(kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools a request to a litellm `CustomLLM` sent (its `optional_params`), as OpenAI schemas."""
    return (kwargs.get("optional_params") or {}).get("tools") or []


def offered_names(kwargs: dict[str, Any]) -> set[str]:
    """The names of the tools a request to a litellm `CustomLLM` offered (`sent_tools`)."""
    return {tool["function"]["name"] for tool in sent_tools(kwargs)}


def text_reply(model: str, content: str, finish: str = "stop", completion_tokens: int = 5) -> Any:
    """A litellm response whose message is plain text (no call), ending for `finish`: "stop", or
    "length" for a reply cut off at its limit."""
    from litellm.types.utils import ModelResponse

    return ModelResponse(model=model, choices=[{"message": {"role": "assistant", "content": content},
                                                "finish_reason": finish}],
                         usage={"prompt_tokens": 10, "completion_tokens": completion_tokens,
                                "total_tokens": 10 + completion_tokens})


def clean_context() -> Any:
    """A multiprocessing context whose children start from a fresh single-threaded server
    process ("forkserver"), for contenders that open a store: a child forked straight from a test
    worker inherits the locks its other threads (an earlier test's store writer or heartbeat)
    held at the fork, and hung in sqlite's connect until killed. `target` must be importable."""
    import multiprocessing

    return multiprocessing.get_context("forkserver")


def run_forked(context: Any, target: Any, arguments: list[tuple], timeout: float = 120) -> list[int | None]:
    """Start one `context.Process(target, args)` per entry of `arguments` together, wait for them
    all (each up to `timeout` seconds) and return their exit codes, in order. One still running
    then is killed (its code is then -9, never 0): a forked child can deadlock on a lock another
    thread of the parent held at the fork, and left alive it would hang the whole suite at exit,
    where multiprocessing joins every child it started."""
    processes = [context.Process(target=target, args=args) for args in arguments]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    codes = [process.exitcode for process in processes]
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    return codes


def stopped_by(stop: int, args: list[str], cwd: Path, started: Callable[[subprocess.Popen], None]) -> tuple[int, str]:
    """Run `optimizer *args` in a process of its own (plain progress lines), send it the signal
    `stop` once `started(process)` returns, and give back its exit code and stderr (it is killed
    if it has not ended 60 s later)."""
    process = subprocess.Popen([str(Path(sys.executable).parent / "optimizer"), *args], cwd=cwd,
                               env={**os.environ, "OPTIMIZER_PLAIN": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        started(process)
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err


def run_pkm_task(tmp_path, task: dict, model: str):
    """Run one PKM task, once, on `model` (the response cache off); its trial."""
    from optimizer.settings.loading import load_settings
    from optimizer.trials.evaluate import execute, prepare
    from optimizer.store import open_store
    from tests.conftest import PROJECT_ROOT

    suite = write_suite(tmp_path / "suite", [task], name="harness", agent_name="pkm_agent")
    settings = load_settings(PROJECT_ROOT, {"agent_model": model, "cache": False})
    run, _ = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), open_store(settings, PROJECT_ROOT))
    return run.trials[0]


def benchmark_module(name: str) -> Iterator[Any]:
    """benchmarks/<name>.py as a module (benchmarks/ is not a package), registered in
    `sys.modules` while in use (dataclasses look their module up there); for a module fixture:
    `yield from benchmark_module("transfer")`."""
    from tests.conftest import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", PROJECT_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
