"""A stand-in for `llama-server` in tests: the same command line, `/health`, `/props` and a
streamed `/completion`, no model. Replies are scripted by the environment:

* `FAKE_LLAMA_REPLY`: the text every completion streams (default `{"final": "ok"}`), in pieces;
* `FAKE_LLAMA_DELAY`: seconds between two pieces (default 0), to make a generation slow;
* `FAKE_LLAMA_ERROR`: a message the stream ends with after its first piece, as llama-server
  reports a failure once the reply has begun (`data: {"error": {...}}`, status 500);
* `FAKE_LLAMA_LOG`: a file that gets one line per completion (the port and the prompt's length),
  so a test can count the calls and see which server answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
            "{% if tools %}<|tools|>{{ tools | tojson }}\n{% endif %}<|assistant|>")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._json({"status": "ok"})
        elif self.path == "/props":
            self._json({"chat_template": TEMPLATE, "bos_token": "", "eos_token": "<|end|>"})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/completion":
            self._json({"error": "not found"}, 404)
            return
        log = os.environ.get("FAKE_LLAMA_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{self.server.server_port} {len(body['prompt'])}\n")
        reply = os.environ.get("FAKE_LLAMA_REPLY", '{"final": "ok"}')
        delay = float(os.environ.get("FAKE_LLAMA_DELAY", "0"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pieces = [reply[i:i + 4] for i in range(0, len(reply), 4)]
        try:
            for piece in pieces:
                self._chunk({"content": piece, "stop": False})
                if os.environ.get("FAKE_LLAMA_ERROR"):
                    self._chunk({"error": {"code": 500, "message": os.environ["FAKE_LLAMA_ERROR"],
                                           "type": "server_error"}})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                time.sleep(delay)
            self._chunk({"content": "", "stop": True, "stop_type": "eos", "tokens_evaluated": len(body["prompt"]) // 4,
                         "tokens_predicted": len(pieces), "timings": {"cache_n": 3}})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _chunk(self, data: dict) -> None:
        payload = f"data: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _json(self, data: dict, status: int = 200) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    options, _ = parser.parse_known_args()
    server = ThreadingHTTPServer((options.host, options.port), Handler)
    server.daemon_threads = True
    print(f"fake llama-server on {options.port} (pid {os.getpid()})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
