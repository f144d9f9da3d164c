"""The embedded model on the card suite: llama-server with 1, 2 and 4 slots, against the engine
it replaced (llama-cpp-python inside the optimizer's process, one sequence at a time).

Needs `optimizer model install`. Each configuration runs the whole card suite once through the
real command (`optimizer eval --suite card_agent --no-cache`, a fresh state folder, the server
started by the run and stopped after it, as a user's run does), one after the other on the same
machine, and prints per configuration:

* card trials per minute (wall clock, model load and server start included) and the ratio to
  the in-process engine;
* pass rate with its 95% Wilson interval, and trials errored;
* the share of prompt tokens served from a reused KV-cache prefix;
* peak resident memory of the optimizer process plus the server (sampled every 0.2 s).

The in-process engine is run from a git worktree of `--baseline-ref` (the last commit that had
it) and needs llama-cpp-python 0.3.36 in this virtualenv: `pip install llama-cpp-python==0.3.36`
with `CMAKE_ARGS` set to the flags in optimizer/engines/llamacpp/install.py (or `--skip-baseline`).

    python benchmarks/local_model.py [--trials 1] [--slots 1,2,4] [--skip-baseline]

`--load` measures instead how the server degrades on a busy machine: generation tokens/s of
`llama-server` at 1 and 2 threads, quiet and beside one CPU-bound process that the script starts
itself (`--load-threads`), and then a card eval beside that process (`--task` narrows it): its
trials by ending, and how many had no completed model call yet were scored `failed` (the agent
charged for the machine's slowness; `docs/models.md`, "A slow machine").

    python benchmarks/local_model.py --load [--load-threads 1,2] [--task 'card_quote_*']

`--replay` records the model calls of one card trial per task (event, fact and quote cards unless
`--task` says) and sends the same calls again at temperature 0 to a server per set-up: 1 and 2
generating threads, and llama.cpp's n-gram speculative decoding (drafts from the conversation
itself, no draft model). Generated tokens/s per set-up, from the server's own timings.

    python benchmarks/local_model.py --replay [--task 'card_quote_*']
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE_REF = "c9b21e6"
"""The last commit whose `local/` provider ran llama-cpp-python in process."""
MODEL = "local/qwen2.5-coder-1.5b"


def wilson(passed: int, total: int, z: float = 1.96) -> tuple[float, float]:
    if total == 0:
        return 0.0, 1.0
    rate = passed / total
    centre = (rate + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(rate * (1 - rate) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


class PeakMemory:
    """Sum of the resident memory of a process tree's members and the servers, sampled."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid, self.peak_kb, self._stop = root_pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kb

    def _sample(self) -> None:
        while not self._stop.is_set():
            pids = {self.root_pid, *_servers()}
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(pid) for pid in pids))
            time.sleep(0.2)


def _servers() -> list[int]:
    from optimizer.engines.llamacpp import server

    return [state["server_pid"] for state in server.running() if state.get("server_pid")]


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_suite(label: str, code_root: Path, trials: int, environment: dict[str, str], tasks: list[str]) -> dict:
    from optimizer.scoring import spoiled
    from optimizer.store import Store, default_url

    with tempfile.TemporaryDirectory() as folder:
        state, out = Path(folder) / "state", Path(folder) / "out.json"
        env = {**os.environ, **environment, "OPTIMIZER_STATE_DIR": str(state), "OPTIMIZER_ROOT": str(ROOT),
               "PYTHONPATH": str(code_root)}
        command = [sys.executable, "-c", "from optimizer.cli import main; main()", "eval", "--suite", "card_agent", "--agent-model", MODEL,
                   "--trials", str(trials), "--no-cache", "--json", str(out),
                   *(part for task in tasks for part in ("--task", task))]
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=code_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                   text=True)
        memory = PeakMemory(process.pid)
        _, err = process.communicate()
        seconds = time.monotonic() - started
        peak_kb = memory.stop()
        if process.returncode != 0:
            raise SystemExit(f"{label}: `{' '.join(command)}` failed ({process.returncode}):\n{err[-2000:]}")
        summary = json.loads(out.read_text())
        trials_run = Store(default_url(state)).trials.load(summary["run_id"])
        prompt = sum(trial.transcript.usage.prompt_tokens for trial in trials_run)
        cached = sum(trial.transcript.usage.cached_prompt_tokens for trial in trials_run)
        silent_failed = sum(1 for trial in trials_run if trial.status == "failed"
                            and trial.transcript.usage.calls + trial.transcript.usage.cache_hits == 0)
        spoiled_count = sum(1 for trial in trials_run if spoiled(trial))
    totals = summary["totals"]
    return {"label": label, "seconds": seconds, "trials": totals["trials"], "passed": totals["passed"],
            "errored": totals["errored"], "prompt": prompt, "cached": cached, "peak_mb": peak_kb / 1024,
            "silent_failed": silent_failed, "spoiled": spoiled_count, "endings": _endings(trials_run)}


def _endings(trials) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in trials:
        counts[trial.status] = counts.get(trial.status, 0) + 1
    return counts


@contextlib.contextmanager
def started_server(binary: Path, gguf: Path, flags: list[str]):
    """A `llama-server` of its own on a free port with `flags`; yields its URL, stops it after."""
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([str(binary), "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                               "--no-webui", "--verbosity", "1", *flags],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit(f"llama-server {' '.join(flags)} did not start")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait()


def completion(url: str, body: dict) -> dict:
    """One non-streamed `/completion`; the server's answer (text, `timings`)."""
    import urllib.request

    request = urllib.request.Request(f"{url}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=900) as answer:
        return json.loads(answer.read())


def generation_rate(binary: Path, gguf: Path, threads: int, requests: int = 3, tokens: int = 96) -> float:
    """Median generation tokens/s (llama-server's own `predicted_per_second`) of `requests`
    completions of `tokens` tokens each, from a server started here with `threads` threads."""
    import statistics

    flags = ["--threads", str(threads), "--threads-batch", str(threads), "--ctx-size", "2048"]
    with started_server(binary, gguf, flags) as url:
        rates = []
        for number in range(requests + 1):  # the first one warms the server up
            timings = completion(url, {"prompt": f"Write a short story about lighthouse number {number}.",
                                       "n_predict": tokens, "temperature": 0, "cache_prompt": False})["timings"]
            if number:
                rates.append(timings["predicted_per_second"])
        return statistics.median(rates)


REPLAY_ARMS = {
    "1 thread": ["--threads", "1"],
    "2 threads": ["--threads", "2"],
    "1 thread, n-gram drafts": ["--threads", "1", "--spec-type", "ngram-simple"],
    "1 thread, short n-gram drafts": ["--threads", "1", "--spec-type", "ngram-simple",
                                      "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "16"],
}
"""Server set-ups `--replay` compares (prompts are read on every core in each)."""


def recorded_calls(tasks: list[str]) -> list[dict]:
    """The `/completion` bodies a card eval sends (one trial per task, in this process, on the
    shared server), recorded as they are sent."""
    from optimizer.cli import app as cli
    from optimizer.engines.llamacpp import served

    bodies, send = [], served.ServedModel._generate

    def recording(self, url, body, deadline):
        bodies.append(dict(body))
        return send(self, url, body, deadline)

    served.ServedModel._generate = recording
    with tempfile.TemporaryDirectory() as folder:
        os.environ["OPTIMIZER_STATE_DIR"] = folder
        try:
            cli(["eval", "--suite", "card_agent", "--agent-model", MODEL, "--trials", "1", "--no-cache",
                 *(part for task in tasks for part in ("--task", task))], standalone_mode=False)
        finally:
            served.ServedModel._generate = send
    return bodies


def replay(args) -> None:
    """The same recorded card calls, at temperature 0 (so every arm generates the same tokens, or
    nearly: drafts change nothing greedy), against a server per arm of `REPLAY_ARMS`."""
    from optimizer.engines.llamacpp import install

    binary, gguf = install.require_server(), install.require_ready()
    bodies = recorded_calls(args.task or ["card_event_*", "card_fact_*", "card_quote_*"])
    cores = str(len(os.sched_getaffinity(0)))
    print(f"{len(bodies)} recorded card calls replayed at temperature 0, {cores} cores, one arm after the other")
    print(f"{'server':<30} {'generated':>9} {'seconds':>8} {'tokens/s':>9} {'ratio':>6}")
    first = None
    for label, flags in REPLAY_ARMS.items():
        with started_server(binary, gguf, [*flags, "--threads-batch", cores, "--ctx-size", "12288"]) as url:
            tokens = milliseconds = 0
            for body in bodies:
                timings = completion(url, {**body, "stream": False, "temperature": 0.0, "seed": 0})["timings"]
                tokens, milliseconds = tokens + timings["predicted_n"], milliseconds + timings["predicted_ms"]
        rate = 1000 * tokens / milliseconds
        first = first or rate
        print(f"{label:<30} {tokens:>9} {milliseconds / 1000:>8.1f} {rate:>9.2f} {rate / first:>5.2f}x", flush=True)


class CpuLoad:
    """One CPU-bound process beside the measurement, as another job on the machine would be."""

    def __enter__(self) -> "CpuLoad":
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return self

    def __exit__(self, *exc) -> None:
        self.process.kill()
        self.process.wait()


def measure_load(args) -> None:
    from optimizer.engines import llamacpp as local
    from optimizer.engines.llamacpp import install

    binary, gguf = install.require_server(), install.require_ready()
    threads = [int(value) for value in args.load_threads.split(",")]
    print(f"llama-server generation, {len(os.sched_getaffinity(0))} cores: median tokens/s of 3 completions "
          f"of 96 tokens")
    print(f"{'threads':>7} {'quiet':>8} {'beside 1 CPU-bound process':>27} {'ratio':>6}")
    for count in threads:
        quiet = generation_rate(binary, gguf, count)
        with CpuLoad():
            loaded = generation_rate(binary, gguf, count)
        print(f"{count:>7} {quiet:>8.1f} {loaded:>27.1f} {loaded / quiet:>5.2f}x", flush=True)
    if args.skip_eval:
        return
    with CpuLoad():
        row = run_suite("card eval beside 1 CPU-bound process", ROOT, args.trials, {}, args.task)
    print(f"card eval beside one CPU-bound process ({row['trials']} trials, {row['seconds'] / 60:.1f} min, "
          f"server threads {local.spec().threads}): endings {row['endings']}; errored as the infrastructure's: "
          f"{row['spoiled']}; failed with no completed model call: {row['silent_failed']}")


def baseline_worktree(ref: str, folder: Path) -> Path:
    tree = folder / "baseline"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), ref], check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=1, help="trials per task (the suite has 25 tasks)")
    parser.add_argument("--slots", default="1,2,4")
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--task", action="append", default=[], help="only these tasks (patterns, for a quick look)")
    parser.add_argument("--load", action="store_true", help="tokens/s quiet and beside a CPU-bound process, then "
                                                           "a card eval beside it")
    parser.add_argument("--load-threads", default="1,2", help="server threads to measure with --load")
    parser.add_argument("--skip-eval", action="store_true", help="with --load: only the tokens/s table")
    parser.add_argument("--replay", action="store_true", help="recorded card calls replayed greedily against "
                                                             "servers with 1 and 2 threads and n-gram drafts")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from optimizer.engines.llamacpp import install

    status = install.status()
    if not status.ready:
        sys.exit("the local model is not ready:\n" + "\n".join(status.lines()))
    if args.load:
        measure_load(args)
        return
    if args.replay:
        replay(args)
        return
    results = []
    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_baseline:
            try:
                import llama_cpp  # noqa: F401
            except ImportError:
                sys.exit("the in-process baseline needs llama-cpp-python 0.3.36 here (or --skip-baseline)")
            tree = baseline_worktree(args.baseline_ref, Path(folder))
            try:
                results.append(run_suite("in process (before)", tree, args.trials, {}, args.task))
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
        for slots in (int(value) for value in args.slots.split(",")):
            results.append(run_suite(f"server, {slots} slot{'s' * (slots > 1)}", ROOT, args.trials,
                                     {"OPTIMIZER_LOCAL_SLOTS": str(slots)}, args.task))
    reference = results[0]["trials"] / results[0]["seconds"]
    print(f"card suite, {args.trials} trial(s) per task, {len(os.sched_getaffinity(0))} cores, one configuration "
          f"after the other")
    print(f"{'engine':<22} {'trials/min':>10} {'ratio':>6} {'passed':>8} {'95% interval':>13} {'errored':>8} "
          f"{'prefix reused':>14} {'peak MB':>8}")
    for row in results:
        low, high = wilson(row["passed"], row["trials"])
        rate = row["trials"] / row["seconds"]
        print(f"{row['label']:<22} {rate * 60:>10.2f} {rate / reference:>5.2f}x {row['passed']:>3}/{row['trials']:<4} "
              f"{low:>6.0%}-{high:<6.0%} {row['errored']:>8} {row['cached'] / max(row['prompt'], 1):>14.0%} "
              f"{row['peak_mb']:>8,.0f}")


if __name__ == "__main__":
    main()
