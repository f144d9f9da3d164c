"""Rollouts the loop spends per iteration, and rollouts to reach the sim's best score.

Runs in a temporary git repository holding a copy of the card suite and prompt, on `mock/sim`,
with `benchmarks/sim_patcher.py` as a command proposer (it appends the sim's general rule for the
targeted bucket). Each accepted branch is merged (`optimizer review --merge`) so the next
iteration starts from it, as a nightly job would.

Prints, per iteration: status, rollouts spent (baseline + confirmation + staged candidate),
how many of them called the model (the rest were served from the response cache, e.g. the part
of a new baseline the accepted candidate already ran), each with its ratio to the naive cost of
two full runs, and the batches of pairs the gate's sequential comparison ran;
then the cumulative rollouts until no train failure can be fixed, and the mean train score
before and after. Stops when nothing is left to fix or after `--patience` rejections in a row
(the loop keeps targeting the worst bucket, so a bucket the rule cannot lift would otherwise be
retried until `--iterations`).

    python benchmarks/loop_efficiency.py [--iterations 16] [--patience 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "agents/prompts/card_agent.md"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_repo(folder: Path) -> Path:
    repo = folder / "repo"
    for part in ("suites/card_agent", "agents/prompts", "prompt_manual", "fixtures"):
        shutil.copytree(ROOT / part, repo / part)
    (repo / "pyproject.toml").write_text("[tool.optimizer]\nconcurrency = 8\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    return repo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=16)
    parser.add_argument("--patience", type=int, default=3, help="stop after this many rejections in a row")
    args = parser.parse_args()

    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store
    from optimizer.loop.iteration import LoopContext, run_iteration
    from optimizer.reporting.review import review

    with tempfile.TemporaryDirectory() as folder:
        repo = make_repo(Path(folder))
        os.environ.update({
            "OPTIMIZER_ROOT": str(repo), "OPTIMIZER_STATE_DIR": str(Path(folder) / "state"),
            "OPTIMIZER_AGENT_MODEL": "mock/sim", "OPTIMIZER_PROPOSER": "command",
            "OPTIMIZER_PROPOSER_COMMAND": f"{sys.executable} {ROOT / 'benchmarks/sim_patcher.py'} "
                                          f"{{request}} {{workdir}} {PROMPT}"})
        settings = load_settings(repo)
        store = open_store(settings, repo)
        ctx = LoopContext(settings=settings.parts, project_root=repo, store=store, log=lambda message: None)
        full = None
        total = total_model = rejected_in_a_row = 0
        first_score = last_score = None
        started = time.perf_counter()
        print(f"{'iter':>4}  {'status':<15} {'target':<24} {'rollouts':>8}  {'vs naive':>8}  "
              f"{'model':>5}  {'vs naive':>8}  batches")
        for number in range(1, args.iterations + 1):
            result = run_iteration(ctx)
            baseline = store.runs.get(result.baseline_run_id)
            full = full or len(store.trials.load(result.baseline_run_id))
            score = baseline["summary"]["splits"]
            train = next(row["mean_score"] for row in score if row["split"] == "train")
            first_score = train if first_score is None else first_score
            last_score = train
            total += result.rollouts
            total_model += result.model_rollouts
            target = result.selection.targets[0].bucket if result.selection else "-"
            naive = 2 * full
            reason = result.proposals[0].reason if result.proposals and result.status != "accepted" else ""
            batches = result.proposals[0].batches if result.proposals else 0
            print(f"{number:>4}  {result.status:<15} {target:<24} {result.rollouts:>8}  "
                  f"{result.rollouts / naive:>7.2f}x  {result.model_rollouts:>5}  "
                  f"{result.model_rollouts / naive:>7.2f}x  {batches:>7}  {reason[:90]}", flush=True)
            if result.status == "accepted":
                review(store, repo, settings.state_dir, result.accepted.branch,
                       merge=True)
            rejected_in_a_row = 0 if result.status == "accepted" else rejected_in_a_row + 1
            if result.status == "nothing_to_fix" or rejected_in_a_row >= args.patience:
                break
        print(f"full run = {full} rollouts; naive iteration = {2 * full} rollouts (two full runs)")
        print(f"mean per iteration: {total / number:.0f} rollouts = {total / number / (2 * full):.2f}x naive; "
              f"{total_model / number:.0f} that called the model = {total_model / number / (2 * full):.2f}x")
        print(f"cumulative rollouts: {total} ({total_model} called the model); train mean score {first_score:.3f} -> {last_score:.3f}; "
              f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
