"""The embedded model served by llama.cpp's own `llama-server`: one server per machine, model and
slot count, shared by every optimizer process that calls the model.

`optimizer model install` builds the binary (see `optimizer.engines.llamacpp.provision`). A process that
calls the embedded model asks `endpoint(slots)` for the server's address; the first one starts
it, the others find it:

* **Users.** A process using a server holds a shared `flock` on `<key>.users` for as long as it
  lives (the kernel lets go when it exits, however it exits, kill -9 included).
* **Supervisor.** The server runs under a small supervisor process of ours
  (`python -m optimizer.engines.llamacpp.server supervise ...`), started detached from the caller's session
  so a Ctrl-C in one terminal does not stop a server others use. It starts `llama-server` on a free
  loopback port with the requested parallel slots (continuous batching is the server's default),
  waits until `/health` answers, and only then writes `<key>.json` (its pid and the port).
  Every `POLL_S` it checks two things: the server process died -> it starts it again on the same
  port (callers whose request it cut retry once it answers `/health`); the users lock can be
  taken exclusively -> nobody uses it any more, so it stops the server, removes the state file
  and exits.
* **Starting.** `<key>.start` (an exclusive `flock`) is held while a caller looks for a server
  and starts one, so two processes starting at once get one server.

Everything lives in `serve_dir()` beside the model file, with the server's log (`<key>.log`),
which an error quotes when the server does not come up.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer.errors import ModelConfigError
from optimizer.engines.llamacpp import install
from optimizer.procfs import alive, prctl, stat_fields

POLL_S = 0.5
READY_TIMEOUT_S = 300.0
"""How long a caller waits for a server to load the model (minutes on a loaded 2-core machine)."""
LOG_TAIL_LINES = 12
LOG_KEEP_BYTES = 1_000_000
"""A server's log past this size is moved to `<key>.log.1` (replacing the one before) when the
next supervisor starts, so the folder holds at most two logs per server however long it is used."""
STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class ServerSpec:
    """What tells one server from another: the model file, its parallel slots, each slot's
    context and the threads generating."""

    slots: int
    slot_context: int
    threads: int
    """Threads generating tokens (`generation_threads`)."""
    batch_threads: int | None = None
    """Threads reading prompts (None: `threads`)."""

    @property
    def key(self) -> str:
        return f"{Path(install.MODEL_FILE).stem}-{self.slots}x{self.slot_context}-t{self.threads}"

    def command(self, binary: Path, gguf: Path, port: int, host: str = "127.0.0.1") -> list[str]:
        """`llama-server`'s command line: one port (on the loopback interface unless `host` names
        another), `slots` sequences decoded together, the context shared by them (`slots` x
        `slot_context` tokens), prompt caching per slot.
        Errors and warnings only are logged (`--verbosity 2`): not a line per request, but why a
        server did not start (a model it cannot load, a port it cannot bind) is in the log."""
        return [str(binary), "--model", str(gguf), "--host", host, "--port", str(port),
                "--parallel", str(self.slots), "--ctx-size", str(self.slots * self.slot_context),
                "--threads", str(self.threads), "--threads-batch", str(self.batch_threads or self.threads),
                "--no-webui", "--cache-prompt", "--verbosity", "2"]


def generation_threads(cores: int) -> int:
    """Threads that generate tokens on a machine with `cores` cores: all but one (one on a one-
    or two-core machine). Every generated token waits at a barrier for the slowest thread, so a
    thread sharing its core with another busy process stalls all of them: with a core left over,
    one such process costs a share of the speed, not most of it. Measured on 2 cores
    (`benchmarks/local_model.py --load`, docs/models.md): 1 thread gave 0.86x its quiet rate
    beside one CPU-bound process, 2 threads 0.39x, for 18% less speed alone. Prompts are read with
    every core (short, compute-bound bursts)."""
    return max(1, cores - 1)


def serve_dir() -> Path:
    return install.model_dir().parent / "serve"


def state_path(spec: ServerSpec) -> Path:
    return serve_dir() / f"{spec.key}.json"


def log_path(spec: ServerSpec) -> Path:
    return serve_dir() / f"{spec.key}.log"


def users_path(spec: ServerSpec) -> Path:
    """The file every user of `spec`'s server holds a shared lock on."""
    return serve_dir() / f"{spec.key}.users"


# ---- the caller's side


_lock = threading.Lock()
_users: dict[str, int] = {}
_known: dict[str, str] = {}


def endpoint(spec: ServerSpec, *, fresh: bool = False) -> str:
    """The base URL of a running server for `spec`, starting one if none runs. This process
    counts as a user of it until it exits (or calls `release`). `fresh` checks again that it
    answers (after a failed call), waiting while its supervisor restarts it."""
    with _lock:
        if not fresh and spec.key in _known:
            return _known[spec.key]
        if spec.key not in _users:
            serve_dir().mkdir(parents=True, exist_ok=True)
            _users[spec.key] = _hold(users_path(spec), fcntl.LOCK_SH)
        starting = _hold(serve_dir() / f"{spec.key}.start", fcntl.LOCK_EX)
        try:
            state = read_state(spec)
            supervisor = None
            if state is None or not _supervisor_alive(state):
                supervisor = _start_supervisor(spec)
            url = _wait_ready(spec, supervisor)
        finally:
            os.close(starting)
        _known[spec.key] = url
        return url


def release(spec: ServerSpec) -> None:
    """Stop being a user of `spec`'s server (its supervisor stops it once nobody else is)."""
    with _lock:
        _known.pop(spec.key, None)
        handle = _users.pop(spec.key, None)
        if handle is not None:
            os.close(handle)


def read_state(spec: ServerSpec) -> dict[str, Any] | None:
    return _read_state(state_path(spec))


def running() -> list[dict[str, Any]]:
    """The servers whose supervisor is alive, as their state files describe them."""
    states = [_read_state(path) for path in sorted(serve_dir().glob("*.json"))] if serve_dir().is_dir() else []
    return [state for state in states if state is not None and _supervisor_alive(state)]


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _start_supervisor(spec: ServerSpec) -> subprocess.Popen:
    binary = install.require_server()
    gguf = install.require_ready()
    state_path(spec).unlink(missing_ok=True)
    command = [sys.executable, "-m", "optimizer.engines.llamacpp.server", "supervise", "--slots", str(spec.slots),
               "--slot-context", str(spec.slot_context), "--threads", str(spec.threads),
               "--batch-threads", str(spec.batch_threads or spec.threads),
               "--binary", str(binary), "--gguf", str(gguf)]
    log_file = log_path(spec)
    if log_file.exists() and log_file.stat().st_size > LOG_KEEP_BYTES:
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    with log_file.open("ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)


def _wait_ready(spec: ServerSpec, supervisor: subprocess.Popen | None) -> str:
    """Wait for the state file and a healthy server; fail with the log's end if the supervisor
    gives up, exits before it writes the state file (`supervisor`, when this process started it),
    or the server never answers."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_state(spec)
        if state is None:
            if supervisor is not None and supervisor.poll() is not None:
                break
        else:
            if state.get("failed") or not _supervisor_alive(state):
                break
            url = f"http://127.0.0.1:{state['port']}"
            if healthy(url):
                return url
        time.sleep(POLL_S / 2)
    raise ModelConfigError(f"the embedded model's server ({spec.slots} slots) did not come up:\n"
                           f"{_log_tail(spec)}", path=log_path(spec), field="local model",
                           fix="read the server's log; `optimizer model install --rebuild` builds it again")


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _hold(path: Path, mode: int) -> int:
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(handle, mode)
    except BaseException:
        os.close(handle)
        raise
    return handle


def _supervisor_alive(state: dict[str, Any]) -> bool:
    """Whether the supervisor a state file names still runs. A state file outlives a reboot (and a
    kill -9 of its supervisor), and its pid may belong to another process by then: the process's
    start time, recorded beside it, tells them apart."""
    return alive(int(state.get("pid") or 0), state.get("started"))


def _log_tail(spec: ServerSpec) -> str:
    try:
        lines = log_path(spec).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


# ---- the supervisor


class _Supervisor:
    def __init__(self, spec: ServerSpec, binary: Path, gguf: Path) -> None:
        self.spec, self.binary, self.gguf = spec, binary, gguf
        self.port = _free_port()
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self.stopping = False

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self._stop_flag())
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        users = users_path(self.spec)
        try:
            if not self._start():
                self._write(failed=True)
                return 1
            self._write()
            while not self.stopping:
                time.sleep(POLL_S)
                if self._unused(users):
                    break
                if self.process.poll() is not None:
                    self.restarts += 1
                    _say(f"llama-server exited with code {self.process.returncode}; restart {self.restarts}")
                    if not self._start():
                        self._write(failed=True)
                        return 1
                    self._write()
        finally:
            self._stop_server()
            if not (read_state(self.spec) or {}).get("failed"):
                state_path(self.spec).unlink(missing_ok=True)
        return 0

    def _stop_flag(self) -> None:
        self.stopping = True

    def _unused(self, users: Path) -> bool:
        """Whether no process holds the users lock; if so it stays taken until this process exits,
        so a caller arriving now waits and then starts a new server."""
        try:
            self._users_handle = _hold(users, fcntl.LOCK_EX | fcntl.LOCK_NB)  # kept open (and locked) until exit
        except BlockingIOError:
            return False
        return True

    def _start(self) -> bool:
        """Start llama-server and wait until it answers; False when it exits first."""
        for attempt in range(2):
            if self.stopping:
                break
            if attempt:
                self.port = _free_port()  # the old port was taken meanwhile
            command = self.spec.command(self.binary, self.gguf, self.port)
            _say("starting: " + " ".join(command))
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sys.stdout,
                                            stderr=subprocess.STDOUT, preexec_fn=_dies_with_parent())
            url = f"http://127.0.0.1:{self.port}"
            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline and not self.stopping:
                if self.process.poll() is not None:
                    break
                if healthy(url):
                    _say(f"ready on {url}")
                    return True
                time.sleep(POLL_S / 2)
            self._stop_server()
        return False

    def _stop_server(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _write(self, failed: bool = False) -> None:
        own = stat_fields(os.getpid())
        state = {"pid": os.getpid(), "started": own[19] if own else None,
                 "server_pid": self.process.pid if self.process else None,
                 "port": self.port, "slots": self.spec.slots, "slot_context": self.spec.slot_context,
                 "restarts": self.restarts, "failed": failed}
        path = state_path(self.spec)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(state), encoding="utf-8")
        os.replace(temporary, path)


def _dies_with_parent() -> Any:
    """What the server runs before `exec` on Linux: the kernel sends it SIGTERM when the supervisor
    dies, kill -9 included, so no server is left holding the model's memory with nobody to stop
    it. (libc is loaded here, before the fork.)"""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    call = prctl()
    pr_set_pdeathsig = 1
    return lambda: call(pr_set_pdeathsig, ctypes.c_ulong(int(signal.SIGTERM)))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _say(message: str) -> None:
    print(f"[supervisor {os.getpid()} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _main(arguments: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m optimizer.engines.llamacpp.server")
    parser.add_argument("action", choices=["supervise"])
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--slot-context", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--batch-threads", type=int)
    parser.add_argument("--binary", type=Path, required=True)
    parser.add_argument("--gguf", type=Path, required=True)
    options = parser.parse_args(arguments)
    spec = ServerSpec(slots=options.slots, slot_context=options.slot_context, threads=options.threads,
                      batch_threads=options.batch_threads)
    return _Supervisor(spec, options.binary, options.gguf).run()


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
