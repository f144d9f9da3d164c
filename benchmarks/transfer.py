"""Transfer: does a prompt change lift the agent on notes nobody tuned to?

The sealed test split (`sealed/card_agent_test`, `sealed/pkm_agent_test`, every task `split:
"test"`) was written once from the task format and the template descriptions, before any tuning,
and no part of the loop reads it: a suite holding such a task refuses to load outside
`optimizer.suites.reading_sealed()`, which only this script enters.

    python benchmarks/transfer.py --validate
        every sealed task replays its reference solution under mock/oracle at score 1.0
    python benchmarks/transfer.py --suite card_agent --before main~3 --after main [--trials 8]
        [--split test --split train --split holdout] [--agent-model local/qwen2.5-coder-1.5b]
        [--code-graders] [--json out.json]

A measurement runs the agent's sealed suite with the prompt file as each of two commits holds it
(a branch, a night's branch, a tag), `--trials` trials per task, the response cache off and a
throw-away store (nothing of the sealed split reaches the project's store, where the loop reads
recorded trials). `--split train` and `--split holdout` measure the same way on the agent's own
suite's tasks of that split (the ones the loop tuned on, and the ones its gate held out), for
the before/after table of all three. It prints per side the trial pass rate, pass@k, pass^k and mean score, per
bucket and overall, and the change paired by task: each task's pass rate after less before,
tested with an exact sign-flip permutation test of the mean difference over tasks (Fisher 1935;
Pitman 1937; Monte Carlo with 200,000 draws past 20 tasks that changed), two-sided, and its
95% interval for the mean change (the shifts that test does not refuse), and the buckets whose
trial pass rate fell by more than one trial in four. `--code-graders` grades with the code graders
alone (no LLM judge): a PKM trial's judges take minutes on the embedded model, and the PKM
figures that matter here (notes filed in the right place, notes rightly skipped) come from the
completion and routing graders; a trial then passes when every code grader passed. Run it with
nothing else on the machine (docs/benchmarks.md#transfer-to-notes-nobody-tuned-to).

`--record FILE` appends every finished trial to FILE (JSON lines, one trial each, with the side's
commit, the agent model, the grading and the task's hash) and reuses the trials already there
that match: a measurement too long for one sitting runs in parts (`--trials 4`, later
`--trials 8` runs trials 4-7 of each task), and a killed one loses only the trials in flight.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from optimizer.suites import reading_sealed  # noqa: E402
from optimizer.validate import validate_suites  # noqa: E402

SEALED = {"card_agent": "sealed/card_agent_test", "pkm_agent": "sealed/pkm_agent_test"}
"""Per agent, its sealed suite's folder (relative to the project)."""


def validate(suites: list[str]) -> int:
    """Replay every sealed task's reference solution; the number of tasks that did not score 1.0."""
    with reading_sealed():
        report = validate_suites(PROJECT_ROOT, suites)
    bad = 0
    for entry in report:
        print(f"{entry.name}: {entry.count} tasks, {len(entry.failures)} failing, "
              f"{len(entry.unreplayed)} without a reference solution")
        for line in entry.failures:
            print(f"  {line}")
        bad += len(entry.failures) + len(entry.unreplayed)
    return bad


def sign_flip_p(differences: list[float], draws: int = 200_000, seed: int = 0) -> float:
    """Two-sided p-value of the mean of paired `differences` under the null that each is as
    likely negative as positive: every sign pattern (exact up to 20 nonzero differences), else
    `draws` random ones."""
    nonzero = [d for d in differences if d]
    if not nonzero:
        return 1.0
    observed = abs(sum(nonzero)) - 1e-12
    if len(nonzero) <= 20:
        patterns = itertools.product((1, -1), repeat=len(nonzero))
        total = hits = 0
        for signs in patterns:
            total += 1
            hits += abs(sum(s * d for s, d in zip(signs, nonzero))) >= observed
        return hits / total
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in nonzero)) >= observed for _ in range(draws))
    return (hits + 1) / (draws + 1)


def sign_flip_interval(differences: list[float], level: float = 0.95, draws: int = 100_000,
                       seed: int = 0) -> tuple[float, float] | None:
    """The paired `level` interval for the mean difference that inverts the sign-flip test: every
    shift d whose test of (differences - d) keeps p above 1 - level (Lehmann & Romano, Testing
    Statistical Hypotheses, 3rd ed., 2005, sec. 3.5 on intervals from tests; the test is `sign_flip_p`).
    One fixed Monte Carlo draw of sign patterns serves every shift, and each end is found by
    bisection to 0.001. None without differences."""
    import numpy as np

    if not differences:
        return None
    values = np.asarray(differences, dtype=float)
    signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(draws, len(values)))
    mean = float(values.mean())

    def p_value(shift: float) -> float:
        shifted = values - shift
        observed = abs(shifted.sum()) - 1e-12
        return (np.count_nonzero(np.abs(signs @ shifted) >= observed) + 1) / (draws + 1)

    def end(toward: float) -> float:
        inside, outside = mean, toward
        while abs(outside - inside) > 0.001:
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if p_value(middle) > 1 - level else (inside, middle)
        return inside

    spread = float(values.max() - values.min()) or 1.0
    return end(mean - spread), end(mean + spread)


def side_summary(trials: list) -> dict:
    """Overall and per bucket, as `optimizer eval` figures them (`optimizer.scoring`): trials,
    errored, the trial pass rate, pass@k and pass^k over tasks and the mean task score."""
    from optimizer.scoring import group_figures, task_figures

    tasks = [{**task, "overall": "overall"} for task in task_figures(trials)]

    def rows(by: str) -> dict[str, dict]:
        out = {}
        for row in group_figures(tasks, [by]):
            group = [task for task in tasks if task[by] == row[by]]
            out[row[by]] = {"trials": row["trials"], "errored": row["errored"],
                            "pass_rate": _ratio(sum(task["passes"] for task in group),
                                                sum(task["scored"] for task in group)),
                            "pass_at_k": _number(row["pass_at_k"]), "pass_hat_k": _number(row["pass_pow_k"]),
                            "mean_score": _number(row["mean_score"])}
        return out

    return {"overall": rows("overall")["overall"], "buckets": rows("bucket")}


def _ratio(part, whole) -> float | None:
    return float(part) / float(whole) if whole else None


def _number(value) -> float | None:
    return None if value is None or value != value else float(value)  # NaN: no scored trial


def _mean(values: list) -> float | None:
    return statistics.fmean(values) if values else None


def filings(agent: str, trials: list) -> dict:
    """For the PKM Agent, how many trials ended each way against their task (`graders/pkm.py:
    filing`: a note to file in the right place, elsewhere, skipped or not filed; a note to skip
    rightly skipped or not); nothing for another agent."""
    if agent != "pkm_agent":
        return {}
    from prompt_optimizer_graders.pkm import filing

    return {"filing": dict(collections.Counter(outcome for outcome in map(filing, trials) if outcome))}


def task_rates(trials: list) -> dict[str, float]:
    """Per task, the share of its scored trials that passed (a task whose every trial errored is left out)."""
    from optimizer.scoring import task_figures

    return {row["task_id"]: row["passes"] / row["scored"] for row in task_figures(trials) if row["scored"]}


def without_judges(suites: list) -> list:
    """The suites with every grader that asks an LLM judge taken off their tasks (a task left
    with no grader is dropped)."""
    from optimizer.registry import get_grader

    kept, dropped = [], []
    for suite in suites:
        tasks = []
        for task in suite.tasks:
            graders = [spec for spec in task.graders if get_grader(spec.name).judge is None]
            if graders:
                tasks.append(task.model_copy(update={"graders": graders}))
            else:
                dropped.append(task.id)
        kept.append(suite.model_copy(update={"tasks": tasks}))
    if dropped:
        print(f"--code-graders: left out {len(dropped)} task(s) graded by judges alone: {', '.join(dropped)}",
              file=sys.stderr)
    if not any(suite.tasks for suite in kept):
        raise SystemExit("--code-graders leaves no task with a grader: measure these suites with their judges")
    return kept


def agent_build(entry) -> str:
    """What besides the measured prompt decides the agent's trials, as this checkout holds it:
    the agent's code, tool schemas and other prompt files (its texts) and the optimizer's source
    (the tool loop). A record made before any of them changed is not reused."""
    from optimizer.provenance import agent_spec, combined, optimizer_source

    spec = agent_spec(entry, "")
    return combined(spec.code, spec.texts, spec.schemas, optimizer_source())


class TrialRecord:
    """`--record`'s file: finished trials, one JSON line each, under the key of the measurement
    side they belong to (commit, agent model, grading, seed, the agent's build) and their task's hash."""

    def __init__(self, path: Path | None):
        self.path = path
        self.lock = threading.Lock()

    def recorded(self, key: dict, tasks: dict[str, str]) -> dict[tuple[str, int], object]:
        """The recorded trials of side `key` whose task is in `tasks` (id -> hash) unchanged, by (task, index)."""
        from optimizer.types import Trial

        found = {}
        if self.path is None or not self.path.exists():
            return found
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                if entry["key"] != key or tasks.get(entry["trial"]["task_id"]) != entry["task_hash"]:
                    continue
                trial = Trial.model_validate(entry["trial"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SystemExit(f"{self.path}:{number}: not a trial this script recorded ({exc}); "
                                 f"fix: remove that line or pass another --record file") from exc
            found[(trial.task_id, trial.index)] = trial
        return found

    def add(self, key: dict, task_hash: str, trial) -> None:
        """Record `trial`, unless it errored (a later part runs it again)."""
        if self.path is None or trial.status == "errored":
            return
        line = json.dumps({"key": key, "task_hash": task_hash, "trial": trial.model_dump(mode="json")})
        with self.lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")


def measure(agent: str, before: str, after: str, trials: int, overrides: dict, split: str = "test",
            code_graders: bool = False, record: Path | None = None) -> dict:
    """Both sides on the agent's tasks of `split` (`test`: its sealed suite); the summaries and the
    paired change. `code_graders`: no LLM judge grades a trial. `record`: see `TrialRecord`."""
    from optimizer import gitops
    from optimizer.settings.loading import load_settings
    from optimizer.loop.staging import export_prompts
    from optimizer.registry import get_agent
    from optimizer.trials.runner import Runner, plan
    from optimizer.store import Store, default_url
    from optimizer.suites import load_suites, task_fingerprint

    repo = gitops.open_repo(PROJECT_ROOT)
    entry = get_agent(agent)
    prompt = gitops.relative(repo, PROJECT_ROOT / entry.prompt_file)
    settings = load_settings(PROJECT_ROOT, {"cache": False, "trials": trials, **overrides})
    with reading_sealed():
        suites = load_suites([SEALED[agent] if split == "test" else agent], PROJECT_ROOT)
    if code_graders:
        suites = without_judges(suites)
    planned = [item for item in plan(suites, trials=trials) if item.task.split == split]
    hashes = {item.task.id: task_fingerprint(item.task) for item in planned}
    wanted = {(item.task.id, item.index) for item in planned}
    kept = TrialRecord(record)
    build = agent_build(entry)
    sides = {}
    with tempfile.TemporaryDirectory(prefix="optimizer-transfer-") as scratch:
        store = Store(default_url(Path(scratch) / "store"))
        try:
            for side, ref in (("before", before), ("after", after)):
                commit = repo.commit(ref).hexsha
                key = {"agent": agent, "split": split, "commit": commit, "agent_model": settings.models.agent_model,
                       "grading": "code graders" if code_graders else settings.models.judge_model,
                       "seed": settings.models.seed, "agent_build": build}
                reused = {at: trial for at, trial in kept.recorded(key, hashes).items() if at in wanted}
                todo = [item for item in planned if (item.task.id, item.index) not in reused]
                root = export_prompts(repo, commit, {entry.prompt_file: prompt}, Path(scratch) / side)
                started = time.monotonic()
                run_trials = []
                if todo:
                    runner = Runner(settings.runner, store, project_root=PROJECT_ROOT, prompt_root=root,
                                    on_trial=lambda trial, key=key: kept.add(key, hashes[trial.task_id], trial))
                    run_trials = runner.run(suites, todo, kind="transfer").trials
                side_trials = [*reused.values(), *run_trials]
                sides[side] = {"ref": ref, "commit": commit[:12], "seconds": round(time.monotonic() - started),
                               "reused": len(reused), "trials": side_trials}
                print(f"{side} ({ref} at {commit[:12]}): {len(run_trials)} trials run in {sides[side]['seconds']} s"
                      + (f", {len(reused)} reused from {record}" if reused else ""),
                      file=sys.stderr)
        finally:
            store.close()
    rates = {side: task_rates(data["trials"]) for side, data in sides.items()}
    tasks = sorted(set(rates["before"]) & set(rates["after"]))
    differences = [rates["after"][t] - rates["before"][t] for t in tasks]
    return {"agent": agent, "suite": SEALED[agent] if split == "test" else agent, "split": split,
            "trials_per_task": trials,
            "agent_model": settings.models.agent_model,
            "judge_model": "none (code graders only)" if code_graders else settings.models.judge_model,
            "sides": {side: {k: v for k, v in data.items() if k != "trials"} | side_summary(data["trials"])
                      | filings(agent, data["trials"]) for side, data in sides.items()},
            "paired": {"tasks": len(tasks), "mean_change": _mean(differences),
                       "up": sum(d > 0 for d in differences), "down": sum(d < 0 for d in differences),
                       "p_two_sided": sign_flip_p(differences),
                       "interval_95": sign_flip_interval(differences)}}


def show(result: dict) -> None:
    before, after = result["sides"]["before"], result["sides"]["after"]
    print(f"{result['suite']}, {result['split']} split: {result['paired']['tasks']} tasks x "
          f"{result['trials_per_task']} trials, agent "
          f"{result['agent_model']}, judge {result['judge_model']}")
    print(f"{'':34} {'before':>30} {'after':>30}")
    print(f"{'':34} {'pass  pass@k pass^k  score':>30} {'pass  pass@k pass^k  score':>30}")
    rows = [("overall", before["overall"], after["overall"])] + [
        (bucket, before["buckets"][bucket], after["buckets"].get(bucket, {})) for bucket in before["buckets"]]
    for name, one, two in rows:
        print(f"{name:34} {_cells(one):>30} {_cells(two):>30}")
    for side, summary in (("before", before), ("after", after)):
        if "filing" in summary:
            print(f"{side}: {filing_line(summary['filing'])}")
    paired = result["paired"]
    print(f"paired by task: mean change of the task pass rate {paired['mean_change']:+.3f} "
          f"({paired['up']} tasks up, {paired['down']} down), sign-flip permutation p = {paired['p_two_sided']:.3f}")
    if paired["interval_95"]:
        low, high = paired["interval_95"]
        print(f"paired 95% interval of the mean change (the sign-flip test inverted): [{low:+.3f}, {high:+.3f}]")
    fell = [bucket for bucket in before["buckets"]
            if _fell(before["buckets"][bucket].get("pass_rate"), after["buckets"].get(bucket, {}).get("pass_rate"))]
    print(f"buckets whose trial pass rate fell by more than {FELL_BY:.2f}: {', '.join(fell) or 'none'}")


def filing_line(counts: dict[str, int]) -> str:
    from prompt_optimizer_graders.pkm import TO_FILE

    to_file = sum(counts.get(outcome, 0) for outcome in TO_FILE)
    to_skip = counts.get("rightly skipped", 0) + counts.get("not skipped", 0)
    right = counts.get("right place", 0)
    share = f" ({right / to_file:.0%})" if to_file else ""
    return (f"notes to file: {to_file} trials, in the right place {right}{share}, filed elsewhere "
            f"{counts.get('filed elsewhere', 0)}, skipped {counts.get('skipped', 0)}, not filed "
            f"{counts.get('not filed', 0)}; notes to skip: {to_skip} trials, rightly skipped "
            f"{counts.get('rightly skipped', 0)}")


FELL_BY = 0.25
"""A bucket's trial pass rate this much lower after is named: more than one trial in four."""


def _fell(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and before - after > FELL_BY + 1e-9


def _cells(summary: dict) -> str:
    def f(value):
        return "  –  " if value is None else f"{value:.2f}"
    return " ".join(f(summary.get(key)) for key in ("pass_rate", "pass_at_k", "pass_hat_k", "mean_score"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validate", action="store_true", help="replay every sealed task under mock/oracle")
    parser.add_argument("--suite", action="append", choices=sorted(SEALED), help="one agent's sealed suite")
    parser.add_argument("--before", help="commit or branch holding the prompt before")
    parser.add_argument("--after", help="commit or branch holding the prompt after")
    parser.add_argument("--trials", type=int, default=8, help="trials per task and side (default 8)")
    parser.add_argument("--split", action="append", choices=["test", "train", "holdout"],
                        help="which tasks (repeatable; default test: the sealed suite)")
    parser.add_argument("--agent-model", help="default: the settings' agent_model (the embedded model)")
    parser.add_argument("--judge-model", help="default: the settings' judge_model")
    parser.add_argument("--concurrency", type=int, help="trials at once (default: the settings')")
    parser.add_argument("--code-graders", action="store_true",
                        help="grade with the code graders only, no LLM judge (a trial passes when they all pass)")
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--record", type=Path,
                        help="append every finished trial here and reuse the matching ones already there")
    args = parser.parse_args()
    names = args.suite or sorted(SEALED)
    if args.validate:
        sys.exit(1 if validate([SEALED[name] for name in names]) else 0)
    if not (args.before and args.after):
        parser.error("pass --validate, or --before and --after")
    if args.code_graders and args.judge_model:
        parser.error("--judge-model has nothing to grade with --code-graders: pass one or the other")
    overrides = {key: value for key, value in (("agent_model", args.agent_model), ("judge_model", args.judge_model),
                                               ("concurrency", args.concurrency)) if value}
    results = [measure(name, args.before, args.after, args.trials, overrides, split, args.code_graders,
                       args.record)
               for name in names for split in args.split or ["test"]]
    for result in results:
        show(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
