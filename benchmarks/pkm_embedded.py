"""The PKM Agent on the embedded model: how its trials end, and where the turns go.

Runs one task per failure bucket of the PKM suite (13 tasks; the first train task of each
bucket, by id, or with `--pick 2` the second: a set the harness and prompt were not tuned on) on
`local/qwen2.5-coder-1.5b` as agent and judge, one trial each, through the real runner, and
prints per task: how the trial ended (finished; finished after the reminders
ran out; turn limit; kept repeating calls; timeout), turns, prompt and generated tokens, seconds and score; then the
totals (share finished by the agent, median turns, median seconds, pass rate, mean score), of
the tasks that must be filed how many were filed and how many in the right place (the
completion and routing graders' verdicts), and where the turns went (tool calls by name, calls repeating the previous one exactly, files read
again, tool errors). Needs `optimizer model install`; asserts nothing.

    python benchmarks/pkm_embedded.py [--tasks N] [--pick K] [--model MODEL] [--transcripts DIR]

The settings are the project's (`OPTIMIZER_LOCAL_THREADS=2` gives the server both cores), with
the model, no response cache and one trial at a time.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from optimizer.settings.config import DEFAULT_MODEL
from optimizer.settings.loading import load_settings  # noqa: E402
from optimizer.trials.runner import PlannedTrial, Runner  # noqa: E402
from optimizer.store import Store  # noqa: E402
from optimizer.suites import load_suite  # noqa: E402
from optimizer.types import Trial  # noqa: E402
from prompt_optimizer_graders.pkm import TO_FILE, filing  # noqa: E402

READS = ("Read",)


def stratified(suite, limit: int | None, pick: int = 1) -> list:
    """The `pick`-th train task of each bucket (by id; a bucket with fewer is left out), at most
    `limit` of them."""
    chosen = collections.defaultdict(list)
    for task in sorted(suite.tasks, key=lambda t: t.id):
        if task.split == "train":
            chosen[task.bucket].append(task)
    tasks = [chosen[bucket][pick - 1] for bucket in sorted(chosen) if len(chosen[bucket]) >= pick]
    return tasks[:limit] if limit else tasks


def ending(trial: Trial) -> str:
    if trial.status == "errored":
        return "errored"
    error = trial.error or ""
    if "repeating" in error:
        return "repeats"
    if "turns" in error:
        return "turn limit"
    if "timeout" in error:
        return "timeout"
    reminders = sum(1 for m in trial.transcript.messages if m.get("role") == "user") - 1  # past the note
    return "finished after reminders" if reminders else "finished"


def where_turns_went(trial: Trial) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    previous, seen_reads = None, set()
    for call in trial.transcript.tool_calls:
        counts[f"call {call.name}"] += 1
        signature = json.dumps([call.name, call.arguments], sort_keys=True, ensure_ascii=False)
        if signature == previous:
            counts["repeats the previous call exactly"] += 1
        previous = signature
        if call.name in READS:
            path = str(call.arguments.get("path") or "")
            if path in seen_reads:
                counts["reads a file again"] += 1
            seen_reads.add(path)
        if call.is_error:
            counts["tool error"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=None, help="at most this many buckets (default: all)")
    parser.add_argument("--pick", type=int, default=1, choices=[1, 2, 3],
                        help="the first (default) or a later train task of each bucket")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--transcripts", type=Path, default=None,
                        help="write each trial's conversation to DIR/<task>.json")
    args = parser.parse_args()
    suite = load_suite("pkm_agent", ROOT)
    tasks = stratified(suite, args.tasks, args.pick)
    planned = [PlannedTrial(suite, task, 0) for task in tasks]
    settings = load_settings(ROOT, {"agent_model": args.model, "judge_model": args.model, "cache": False,
                                    "concurrency": 1})
    rows, where = [], collections.Counter()
    with tempfile.TemporaryDirectory() as folder:
        store = Store(f"sqlite:///{folder}/bench.db")
        runner = Runner(settings.runner, store, project_root=ROOT)
        print(f"{'task':<40} {'bucket':<28} {'ending':<25} {'turns':>5} {'prompt':>8} {'gen':>6} "
              f"{'s':>6} {'score':>5} filing", flush=True)
        for item in planned:
            started = time.monotonic()
            trial = runner.run([suite], [item], kind="bench").trials[0]
            seconds = time.monotonic() - started
            usage = trial.transcript.usage
            row = {"task": trial.task_id, "bucket": trial.bucket, "ending": ending(trial), "turns": usage.calls,
                   "prompt": usage.prompt_tokens, "generated": usage.completion_tokens, "seconds": seconds,
                   "score": trial.score if trial.score is not None else float("nan"),
                   "passed": trial.status == "passed", "filing": filing(trial)}
            rows.append(row)
            if args.transcripts:
                args.transcripts.mkdir(parents=True, exist_ok=True)
                (args.transcripts / f"{trial.task_id}.json").write_text(json.dumps(
                    {"ending": row["ending"], "error": trial.error, "messages": trial.transcript.messages},
                    indent=1, ensure_ascii=False, default=str), encoding="utf-8")
            where.update(where_turns_went(trial))
            print(f"{row['task']:<40} {row['bucket']:<28} {row['ending']:<25} {row['turns']:>5} "
                  f"{row['prompt']:>8,} {row['generated']:>6,} {row['seconds']:>6.0f} {row['score']:>5.2f} "
                  f"{row['filing']}", flush=True)
    finished = sum(1 for r in rows if r["ending"].startswith("finished"))
    scores = [r["score"] for r in rows if r["score"] == r["score"]]
    print(f"\n{len(rows)} trials: finished by the agent {finished}/{len(rows)} = {finished / len(rows):.0%}; "
          f"median turns {statistics.median(r['turns'] for r in rows):.0f}; "
          f"median seconds {statistics.median(r['seconds'] for r in rows):.0f}; "
          f"pass {sum(r['passed'] for r in rows)}/{len(rows)}; "
          f"mean score {statistics.mean(scores) if scores else float('nan'):.2f}")
    to_file = [r["filing"] for r in rows if r["filing"] in TO_FILE]
    print(f"tasks to be filed {len(to_file)}: filed {sum(f in ('right place', 'filed elsewhere') for f in to_file)}, "
          f"in the right place {to_file.count('right place')}, skipped {to_file.count('skipped')}")
    print("endings: " + ", ".join(f"{name} {count}" for name, count in
                                  collections.Counter(r["ending"] for r in rows).most_common()))
    print("where the turns went: " + ", ".join(f"{name} {count}" for name, count in where.most_common()))


if __name__ == "__main__":
    main()
