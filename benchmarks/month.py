"""A month of unattended nights on the simulator, judged by the simulator's ground truth.

Each month is a fresh copy of the project (its suites, agents, prompts, manual and fixtures) in
a throw-away git repository. Night after night, `optimizer nightly --merge` runs there as a
separate process, exactly as a scheduled job would: `mock/sim` plays the agents with independent
noise, the weak `mock/patcher` (skill 0.3 by default: its wrong answers include the effect
library's harmful lines and the other buckets' contradictions) proposes `edits`, the shipped gate
decides, and what it accepts is merged into `main`, where the next night starts. After the last
night the final prompt is scored by the simulator itself (`SimProfile.pass_probability`, the true
pass rate of every task, no sampling) against the starting prompt, per bucket.

    python benchmarks/month.py --suite card_agent --months 20 --seed 101 [--nights 30]
        [--setting refuse_unsafe=any ...] [--keep DIR]

Per month it prints the true per-bucket change (start -> end), the merged lines by kind (read
from `agents/*/sim_rules.json`: rule, distractor, harmful effect, contradiction, other), the
buckets a merged harmful line holds below what their merged rules give, reverts, trials run and
wall time; then the same over the months: months ending with a bucket >= 0.20 below its start,
bucket-months >= 0.10 below, months ending with a harmful line, the mean gain. A month's seeds
are its number plus `--seed`; report the seeds with the figures (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from optimizer.registry import get_agent  # noqa: E402
from optimizer.suites import load_suite  # noqa: E402

OPTIMIZER = str(Path(sys.executable).parent / "optimizer")
COPIED = ("suites", "agents", "prompt_manual", "fixtures")
COLLAPSE = 0.20
"""A bucket this far below its start at the month's end has collapsed."""
SLIPPED = 0.10
HELD_DOWN = 0.05
"""A bucket whose true rate rises by this much when the merged harmful lines are taken out is
held below what its merged rules give."""


@dataclass
class Month:
    seed: int
    start: dict[str, float]
    end: dict[str, float]
    lines: dict[str, list[str]]
    held_down: dict[str, float]
    reverts: int
    trials: int
    seconds: float
    nights: list[str] = field(default_factory=list)

    def changes(self) -> dict[str, float]:
        return {bucket: self.end[bucket] - self.start[bucket] for bucket in self.start}

    @property
    def gain(self) -> float:
        return statistics.mean(self.end.values()) - statistics.mean(self.start.values())

    @property
    def harmful_kept(self) -> bool:
        return bool(self.lines["contradiction"] or self.lines["harmful effect"])


def true_rates(suite_name: str, root: Path, prompt: str) -> dict[str, float]:
    """Per bucket, the mean over its tasks (every split) of the simulator's pass probability."""
    suite = load_suite(suite_name, root)
    profile = get_agent(suite.spec.agent_name).sim_profile
    rates: dict[str, list[float]] = {}
    for task in suite.tasks:
        rates.setdefault(task.bucket, []).append(profile.pass_probability(task, prompt))
    return {bucket: statistics.mean(values) for bucket, values in sorted(rates.items())}


def line_kinds(suite_name: str, root: Path, added: list[str]) -> dict[str, list[str]]:
    """The added prompt lines by what the simulator's rule texts say they are."""
    texts = get_agent(load_suite(suite_name, root).spec.agent_name).sim_profile.rule_texts
    kinds: dict[str, list[str]] = {"rule": [], "distractor": [], "harmful effect": [], "contradiction": [],
                                   "other": []}
    rules, contradictions = set(texts.rules.values()), set(texts.contradictions.values())
    harmful = {text for effect in texts.effects if effect.harmful for text in effect.wordings.values()}
    for line in added:
        text = line.strip().removeprefix("- ").strip()
        if not text:
            continue
        kind = ("rule" if text in rules else "contradiction" if text in contradictions else
                "harmful effect" if any(wording in text for wording in harmful) else
                "distractor" if text in texts.distractors else "other")
        kinds[kind].append(text)
    return kinds


def held_down(suite_name: str, root: Path, prompt: str, harmful: list[str]) -> dict[str, float]:
    """Buckets the harmful lines hold down: their true rate without those lines, less with."""
    cleaned = "\n".join(line for line in prompt.splitlines()
                        if not any(text in line for text in harmful))
    with_lines, without = true_rates(suite_name, root, prompt), true_rates(suite_name, root, cleaned)
    return {bucket: without[bucket] - with_lines[bucket] for bucket in with_lines
            if without[bucket] - with_lines[bucket] >= HELD_DOWN}


def new_project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in COPIED:
        shutil.copytree(PROJECT_ROOT / name, folder / name)
    (folder / "pyproject.toml").write_text("[tool.optimizer]\nconcurrency = 8\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=month", "-c", "user.email=month@example.com", "commit", "-qm", "month start"]):
        subprocess.run(["git", *args], cwd=folder, check=True)
    return folder


def month_env(root: Path, seed: int, skill: float, settings: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPTIMIZER_")}
    env.update(OPTIMIZER_ROOT=str(root), OPTIMIZER_STATE_DIR=str(root / ".optimizer"), OPTIMIZER_PLAIN="1",
               OPTIMIZER_AGENT_MODEL="mock/sim", OPTIMIZER_JUDGE_MODEL="mock/sim",
               OPTIMIZER_PATCHER_MODEL="mock/patcher", OPTIMIZER_MOCK_PATCHER_SKILL=str(skill),
               OPTIMIZER_SIM_NOISE="independent", OPTIMIZER_PATCH_FORMAT="edits", OPTIMIZER_SEED=str(seed))
    env.update({f"OPTIMIZER_{name.upper()}": value for name, value in settings.items()})
    return env


def run_month(suite_name: str, seed: int, nights: int, skill: float, settings: dict[str, str], parent: Path,
              log) -> Month:
    root = new_project(parent / f"month-{seed}")
    prompt_file = PROJECT_ROOT / get_agent(load_suite(suite_name, root).spec.agent_name).prompt_file
    relative = prompt_file.relative_to(PROJECT_ROOT)
    start_prompt = (root / relative).read_text(encoding="utf-8")
    began = time.monotonic()
    outcomes = []
    for night in range(1, nights + 1):
        day = date(2027, 1, 1) + timedelta(days=night - 1)
        env = month_env(root, seed * 1000 + night, skill, settings)
        done = subprocess.run([OPTIMIZER, "nightly", "--merge", "--suite", suite_name, "--date", day.isoformat(),
                               "--json", str(root / ".optimizer" / f"night-{night}.json")],
                              cwd=root, env=env, capture_output=True, text=True)
        summary_path = root / ".optimizer" / f"night-{night}.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        accepted = summary.get("accepted", 0)
        outcomes.append(f"{accepted}{'m' if summary.get('merged') else ''}" if done.returncode == 0 else
                        f"exit{done.returncode}")
        log(f"  seed {seed} night {night:>2}: exit {done.returncode}, {accepted} accepted, "
            f"{'merged' if summary.get('merged') else 'not merged'}; {summary.get('stop_reason', '')}")
        if done.returncode not in (0, 1):
            log(done.stderr[-2000:])
    end_prompt = (root / relative).read_text(encoding="utf-8")
    start_lines = set(start_prompt.splitlines())
    kinds = line_kinds(suite_name, root, [line for line in end_prompt.splitlines() if line not in start_lines])
    harmful = kinds["contradiction"] + kinds["harmful effect"]
    reverts = len(subprocess.run(["git", "log", "--format=%s", "main"], cwd=root, capture_output=True, text=True,
                                 check=True).stdout.lower().split("\nrevert")) - 1
    with sqlite3.connect(root / ".optimizer" / "optimizer.db") as db:
        trials = db.execute("select count(*) from trials").fetchone()[0]
    return Month(seed, true_rates(suite_name, root, start_prompt), true_rates(suite_name, root, end_prompt), kinds,
                 held_down(suite_name, root, end_prompt, harmful) if harmful else {}, reverts, trials,
                 time.monotonic() - began, outcomes)


def report_month(month: Month) -> None:
    changes = month.changes()
    print(f"month seed {month.seed}: true mean bucket pass rate {statistics.mean(month.start.values()):.2f} -> "
          f"{statistics.mean(month.end.values()):.2f} ({month.gain:+.2f}); {month.trials:,} trials, "
          f"{month.seconds / 60:.1f} min; reverts {month.reverts}; nights {' '.join(month.nights)}")
    for bucket in month.start:
        mark = " COLLAPSED" if changes[bucket] <= -COLLAPSE else " slipped" if changes[bucket] <= -SLIPPED else ""
        print(f"  {bucket:<24} {month.start[bucket]:.2f} -> {month.end[bucket]:.2f} ({changes[bucket]:+.2f}){mark}")
    print("  merged lines: " + ", ".join(f"{kind} {len(lines)}" for kind, lines in month.lines.items()))
    for kind in ("contradiction", "harmful effect", "other"):
        for text in month.lines[kind]:
            print(f"    {kind}: {text}")
    if month.held_down:
        print("  held down by harmful lines: " + ", ".join(f"{b} {d:+.2f}" for b, d in month.held_down.items()))


def report_summary(months: list[Month]) -> None:
    n = len(months)
    collapsed = sum(1 for m in months if any(c <= -COLLAPSE for c in m.changes().values()))
    bucket_months = sum(len(m.start) for m in months)
    slipped = sum(1 for m in months for c in m.changes().values() if c <= -SLIPPED)
    harmful = sum(1 for m in months if m.harmful_kept)
    held = sum(1 for m in months if m.held_down)
    print(f"\n{n} month(s), seeds {', '.join(str(m.seed) for m in months)}")
    print(f"  true mean bucket pass rate: start {statistics.mean(statistics.mean(m.start.values()) for m in months):.2f}"
          f", end {statistics.mean(statistics.mean(m.end.values()) for m in months):.2f}; mean gain "
          f"{statistics.mean(m.gain for m in months):+.3f} (min {min(m.gain for m in months):+.2f}, "
          f"max {max(m.gain for m in months):+.2f})")
    print(f"  months ending with a bucket >= {COLLAPSE:.2f} below its start: {collapsed} of {n}")
    print(f"  bucket-months >= {SLIPPED:.2f} below the start: {slipped} of {bucket_months} "
          f"({slipped / bucket_months:.1%})")
    print(f"  months ending with a contradiction or harmful effect line: {harmful} of {n} ({harmful / n:.0%})")
    print(f"  months with a bucket held down by a merged harmful line: {held} of {n} ({held / n:.0%})")
    kinds = {kind: sum(len(m.lines[kind]) for m in months) for kind in months[0].lines}
    print("  merged lines over the months: " + ", ".join(f"{kind} {count}" for kind, count in kinds.items()))
    print(f"  reverts {sum(m.reverts for m in months)}; trials per month mean {statistics.mean(m.trials for m in months):,.0f}"
          f" (min {min(m.trials for m in months):,}, max {max(m.trials for m in months):,}); wall time per month "
          f"{statistics.mean(m.seconds for m in months) / 60:.1f} min")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=["card_agent", "pkm_agent"], default="card_agent")
    parser.add_argument("--months", type=int, default=1)
    parser.add_argument("--seed", type=int, default=100, help="the first month's seed; month k has seed + k")
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--skill", type=float, default=0.3, help="the weak patcher's skill (mock_patcher_skill)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for every night, as its environment variable gives it (e.g. refuse_unsafe=any)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the months' repositories here")
    parser.add_argument("--quiet", action="store_true", help="no line per night")
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.setting)
    parent = args.keep or Path(tempfile.mkdtemp(prefix="optimizer-month-", dir=os.environ.get("MONTH_DIR")))
    parent.mkdir(parents=True, exist_ok=True)
    log = (lambda message: None) if args.quiet else (lambda message: print(message, flush=True))
    print(f"{args.months} month(s) x {args.nights} nights of `optimizer nightly --merge --suite {args.suite}` on "
          f"mock/sim (independent noise), weak patcher at skill {args.skill}, settings {settings or 'shipped'}",
          flush=True)
    months = []
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))  # the summary and clean-up below still run
    try:
        for k in range(args.months):
            month = run_month(args.suite, args.seed + k, args.nights, args.skill, settings, parent, log)
            report_month(month)
            months.append(month)
            sys.stdout.flush()
    finally:
        if months:
            report_summary(months)
        if args.keep is None:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
