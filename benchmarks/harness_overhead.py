"""Harness overhead: 1,000 trials on a mock model with a fixed 50 ms latency at concurrency 32.

A warm-up run (one trial per worker, not timed) pays the one-off costs first: importing
litellm and loading its tokenizer. Prints the wall time against the ideal (model calls x latency
/ concurrency). Target: at most 1.15x the ideal. Runs the real path: suite loading, the runner's
thread pool, per-trial workspaces, the Card Agent's tool loop, litellm, graders, the store and
the response cache.

The trials run on the runner's threads in one process; `without_litellm_*` repeats the run with
the mock answered without litellm, as `suites validate` does (same latency, same everything
else), which separates litellm's share of the overhead from the harness's own. What bounds the
figures: the CPU cost of one trial measured sequentially (`cpu_ms_per_trial`; trials x that is a
floor on the wall time, one interpreter running the trials' Python one thread at a time) and the
part of it that is litellm's own per-call work (`litellm_ms_per_call`). `cpu_s` is the process's
CPU time (user + system) during the timed run.

    python benchmarks/harness_overhead.py [--trials 1000] [--concurrency 32] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from optimizer.settings.config import Settings  # noqa: E402
from optimizer.trials.evaluate import execute, prepare  # noqa: E402
from optimizer.trials.runner import Runner  # noqa: E402
from optimizer.store import Store, default_url  # noqa: E402
from tests.helpers import event_task, write_suite  # noqa: E402


def sequential_ms_per_trial(suite: Path, scratch: Path, trials: int = 200) -> float:
    """CPU cost of one trial: the same suite at zero latency, one trial at a time."""
    settings = Settings(agent_model="mock/oracle", trials=trials, concurrency=1)
    store = Store(default_url(scratch / "sequential"))
    started = time.perf_counter()
    execute(prepare(settings.evaluation, ROOT, [str(suite)]), store)
    return (time.perf_counter() - started) * 1000 / trials


def litellm_ms_per_call(plan, calls: int = 300) -> float:
    """What litellm.completion alone costs per call on the in-process mock (no harness around it)."""
    from optimizer.models import TrialContext, litellm_module, register_trial
    from optimizer.models._context import METADATA_KEY

    litellm = litellm_module()
    task = plan.trials[0].task
    register_trial("bench", TrialContext(task=task, agent_name="card_agent", trial_index=0, seed=0))
    messages = [{"role": "system", "content": "x" * 2000}, {"role": "user", "content": task.input.content}]
    started = time.perf_counter()
    for _ in range(calls):
        litellm.completion(model="mock/oracle", messages=messages, metadata={METADATA_KEY: "bench"})
    return (time.perf_counter() - started) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--no-cache", action="store_true", help="switch the response cache off")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="optimizer-bench-") as scratch:
        scratch = Path(scratch)
        suite = write_suite(scratch / "suite", [event_task("bench_event")], name="bench")
        settings = Settings(agent_model=f"mock/oracle@{args.latency_ms}ms", trials=args.trials,
                            concurrency=args.concurrency, cache=not args.no_cache)
        warm = Settings(agent_model=settings.agent_model, trials=args.concurrency, concurrency=args.concurrency)
        execute(prepare(warm.evaluation, ROOT, [str(suite)]), Store(default_url(scratch / "warm")))
        plan = prepare(settings.evaluation, ROOT, [str(suite)])
        store = Store(default_url(scratch / "state"))
        started, cpu_started = time.perf_counter(), time.process_time()
        run, summary = execute(plan, store)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        direct = Runner(settings.runner, Store(default_url(scratch / "direct")), project_root=ROOT, in_process=True)
        started = time.perf_counter()
        direct.run(plan.suites, plan.trials)
        wall_direct = time.perf_counter() - started
        cpu_ms_per_trial = sequential_ms_per_trial(suite, scratch)
        litellm_ms = litellm_ms_per_call(plan)
    calls = summary["totals"]["model_calls"]
    ideal = calls * args.latency_ms / 1000 / args.concurrency

    def ratio(seconds: float) -> float | None:
        return round(seconds / ideal, 3) if ideal else None

    result = {"trials": len(run.trials), "passed": summary["totals"]["passed"], "model_calls": calls,
              "concurrency": args.concurrency, "latency_ms": args.latency_ms, "cpus": os.cpu_count(),
              "wall_s": round(wall, 3), "ideal_s": round(ideal, 3), "ratio": ratio(wall), "target_ratio": 1.15,
              "cpu_s": round(cpu, 3),
              "without_litellm_wall_s": round(wall_direct, 3), "without_litellm_ratio": ratio(wall_direct),
              "cpu_ms_per_trial": round(cpu_ms_per_trial, 2),
              "cpu_floor_s": round(cpu_ms_per_trial * len(run.trials) / 1000, 3),
              "litellm_ms_per_call": round(litellm_ms, 2)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
