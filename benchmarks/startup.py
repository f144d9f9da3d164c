"""Start-up: `optimizer history` and `optimizer --help`, each in a fresh process, N times.

Builds a SQLite store of a few runs, an iteration, a nightly job and ledger entries in a temporary
state folder (or reads `--state-dir`), runs each command once untimed (so bytecode is cached),
then N times alternated, and prints min / median / max of the wall time and of the CPU time
(user + system) of the whole process. The model settings are left at their defaults (the
embedded model, checked by name only; nothing is started).

With `--compare DIR`, DIR holds another copy of the `optimizer` package (e.g.
`git archive <commit> optimizer | tar -x -C DIR`): it is timed in the same rounds, alternated with
this checkout, so both see the same load; the ratio column is taken run by run.

    python benchmarks/startup.py [--runs 15] [--state-dir DIR] [--compare DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMANDS = {"history": ["history"], "--help": ["--help"]}


def build_store(state: Path) -> None:
    """Two runs, an iteration with a proposal, a nightly job and two ledger entries: every table
    `history` prints has rows."""
    from optimizer.store import Store, default_url
    from tests.store_rows import add_iteration, add_nightly, add_run, ledger_entry

    store = Store(default_url(state))
    baseline = add_run(store, "run-000001", "baseline", {"trivial_input": 0.5, "fact_preservation": 0.75}, 0)
    add_run(store, "run-000002", "eval", {"trivial_input": 0.75, "fact_preservation": None}, 1)
    add_iteration(store, "it-1", baseline, ["card_agent/trivial_input"], "rejected", [{"status": "rejected_gate"}])
    add_nightly(store, "n-1", ["it-1"], 0)
    for entry in (ledger_entry("agent", "it-1", 0.25, 100), ledger_entry("patcher", "it-1", 1.0, 50)):
        store.ledger.record(entry)
    store.close()


def environment(state: Path, package_dir: Path) -> dict[str, str]:
    """The command's environment: `optimizer` imported from `package_dir`, this project as the
    project (the processes run in the state folder, so the current folder does not decide which
    `optimizer` is imported)."""
    env = {key: value for key, value in os.environ.items()
           if not key.endswith("_MODEL") and key not in ("PYTHONPATH", "OPTIMIZER_STATE_DIR")}
    env.update(OPTIMIZER_ROOT=str(ROOT), OPTIMIZER_STATE_DIR=str(state), PYTHONPATH=str(package_dir))
    return env


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process running `optimizer <args>`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from optimizer.cli import main; main()", *args],
                          env=env, cwd=env["OPTIMIZER_STATE_DIR"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"optimizer {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spread(values: list[float]) -> str:
    return f"{min(values):6.3f} {statistics.median(values):6.3f} {max(values):6.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--state-dir", type=Path, help="an existing state folder to read instead of a built one")
    parser.add_argument("--compare", type=Path, help="a folder holding another copy of the optimizer package")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        state = args.state_dir or Path(scratch) / "state"
        if args.state_dir is None:
            build_store(state)
        arms = {"this checkout": environment(state, ROOT)}
        if args.compare:
            arms["compared"] = environment(state, args.compare.resolve())
        times = {(arm, name): [] for arm in arms for name in COMMANDS}
        for arm, env in arms.items():
            for command in COMMANDS.values():
                timed(command, env)  # untimed: bytecode cached, files in the page cache
        for _ in range(args.runs):
            for name, command in COMMANDS.items():
                for arm, env in arms.items():
                    times[arm, name].append(timed(command, env))
    load = os.getloadavg()
    print(f"{args.runs} runs each, fresh processes; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"seconds as min / median / max")
    print(f"{'command':<10} {'arm':<14} {'wall':>20}   {'CPU':>20}   CPU ratio to compared, median")
    for (arm, name), pairs in times.items():
        ratio = ""
        if arm != "compared" and ("compared", name) in times:
            ratio = f"{statistics.median(a[1] / b[1] for a, b in zip(pairs, times['compared', name])):.2f}"
        print(f"{name:<10} {arm:<14} {spread([p[0] for p in pairs])}   {spread([p[1] for p in pairs])}   {ratio}")


if __name__ == "__main__":
    main()
