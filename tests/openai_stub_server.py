"""A small OpenAI-compatible chat server of ours, run as its own process by the Router tests.

    python tests/openai_stub_server.py --port 0 --name A --log calls-A.txt [--die-on 5] [--delay 0.02]

It prints `PORT <n>` once it listens, then answers `POST /v1/chat/completions` as `mock/oracle`
would: it finds the task by the first user message (each suite's agent builds it with its
`user_message(task)`), replays the task's `reference_solution.tool_calls` one per assistant turn
(in the order the agent asks for them: `AgentEntry.replay`)
and then answers with a short final message. A request that matches no task gets that final
message. Every answered request is one line in the `--log` file, so a test can count what each
server answered even after it is gone. `--die-on N` kills the process with SIGKILL when the N-th
request arrives, before it is answered: a server lost in the middle of a call.

A server whose answers depend on the prompt (`--marker TEXT --bucket B --slow S`): without TEXT in
the system message, bucket B's tasks get the final message at once (they fail); with it, they get
their reference calls, and every other task's answer waits S seconds first (a patch that makes
the model slow on the notes it was not written for).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))
from optimizer.models.mock import scripted_reply  # noqa: E402


def task_calls(suite_names: list[str], root: Path = PROJECT_ROOT) -> dict[str, tuple[list, str]]:
    """The reference tool calls and the bucket of every task of these suites, by the task's first
    user message."""
    sys.path.insert(0, str(PROJECT_ROOT))
    from optimizer.registry import get_agent
    from optimizer.suites import load_suites

    calls: dict[str, list] = {}
    for suite in load_suites(suite_names, root):
        entry = get_agent(suite.spec.agent_name)
        user_message = importlib.import_module(entry.run.__module__).user_message
        for task in suite.tasks:
            script = task.reference_calls()
            calls[user_message(task)] = (entry.replay(task, script) if entry.replay else script, task.bucket)
    return calls


@dataclass(frozen=True)
class PromptDependence:
    """`--marker`, `--bucket`, `--slow` (see the module docstring)."""

    marker: str
    bucket: str
    slow: float

    def shape(self, messages: list[dict], script: list, bucket: str) -> tuple[list, float]:
        """The script to replay and the seconds to wait first."""
        marked = any(self.marker in str(m.get("content") or "") for m in messages if m.get("role") == "system")
        if bucket == self.bucket:
            return (script if marked else []), 0.0
        return script, (self.slow if marked else 0.0)


class Stub:
    def __init__(self, name: str, log: Path, calls: dict[str, tuple[list, str]], die_on: int | None, delay: float,
                 reply: str | None = None, depends: PromptDependence | None = None):
        self.name, self.log, self.calls, self.die_on, self.delay = name, log, calls, die_on, delay
        self.depends = depends
        self.reply = reply
        """With `--reply-file`: the text of every answer to a request without tools (a coding agent's
        edit, say), instead of the short final message."""
        self.received = 0
        self.lock = threading.Lock()

    def arrived(self) -> None:
        with self.lock:
            self.received += 1
            if self.die_on is not None and self.received >= self.die_on:
                os.kill(os.getpid(), signal.SIGKILL)

    def answer(self, body: dict) -> dict:
        messages = body.get("messages") or []
        first = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
        script, bucket = self.calls.get(first, ([], "")) if body.get("tools") else ([], "")
        wait = self.delay
        if self.depends is not None:
            script, slow = self.depends.shape(messages, script, bucket)
            wait += slow
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        message, finish = scripted_reply(script, messages)
        if self.reply is not None and not body.get("tools"):
            message, finish = {"role": "assistant", "content": self.reply}, "stop"
        time.sleep(wait)
        with self.lock, self.log.open("a", encoding="utf-8") as out:
            out.write(f"{self.name} turn={turn}\n")
        prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4
        return {"id": f"chatcmpl-{self.name}-{turn}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "stub"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": 10, "total_tokens": prompt + 10}}


def handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self.send(404, {"error": {"message": f"no route {self.path}"}})
                return
            stub.arrived()
            self.send(200, stub.answer(body))

        def send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            return

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--name", default="stub")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--suite", action="append", help="suites whose tasks it answers (default: card_agent)")
    parser.add_argument("--die-on", type=int, default=None)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--reply-file", type=Path, help="answer every request without tools with this text")
    parser.add_argument("--marker", help="the system-message text the answers depend on (with --bucket, --slow)")
    parser.add_argument("--bucket", help="the bucket that passes only with the marker")
    parser.add_argument("--slow", type=float, default=0.0, help="seconds every other task waits with the marker")
    parser.add_argument("--root", type=Path, default=PROJECT_ROOT, help="the project whose suites it answers")
    args = parser.parse_args()
    depends = PromptDependence(args.marker, args.bucket, args.slow) if args.marker else None
    stub = Stub(args.name, args.log, task_calls(args.suite or ["card_agent"], args.root), args.die_on, args.delay,
                args.reply_file.read_text() if args.reply_file else None, depends)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(stub))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
