"""The embedded model through our litellm provider, against llama-cpp-python called directly.

Needs `optimizer model install`. Prints, from one run on one loaded model:

* prompt tokens/s: a ~1,000-token card prompt evaluated from an empty KV cache, max_tokens 1;
* generation tokens/s: 128 tokens greedily generated after a cached prompt;
  each measured through `litellm.completion(model="local/qwen2.5-coder-1.5b")` and through
  `Llama.create_completion` on the same instance, alternating which goes first, median of
  `--repeats`;
* over a 25-task card suite run (one trial per task, the real runner): the share of prompt
  tokens served from the reused prefix, seconds per card trial, pass rate;
* the process's peak resident memory.

    python benchmarks/local_model.py [--repeats 3] [--skip-suite]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATE = 128


def card_messages() -> list[dict]:
    system = (ROOT / "agents/prompts/card_agent.md").read_text(encoding="utf-8")
    return [{"role": "system", "content": system},
            {"role": "user", "content": "Standup with the eval team Thursday 10:30am, Zoom\n\n"
                                        "Raw Input ID (fact_id): 2026/05/25.md#ts_1\n"
                                        "Published time: 2026-05-25T08:55:00+00:00\n"}]


def story_messages() -> list[dict]:
    return [{"role": "system", "content": "You are a storyteller."},
            {"role": "user", "content": "Tell a long, detailed story about a lighthouse keeper. At least 400 words."}]


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    value = function()
    return time.perf_counter() - started, value


def throughput(repeats: int) -> None:
    from optimizer.models import litellm_module, local

    litellm = litellm_module()
    model = local._model
    llama = model._load()

    def prompt_tokens(messages: list[dict]) -> list[int]:
        text = model._formatter(messages=messages).prompt
        return llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    card = prompt_tokens(card_messages())
    story = prompt_tokens(story_messages())

    def provider_prompt() -> float:
        llama.reset()
        seconds, response = timed(lambda: litellm.completion(model=local.MODEL, messages=card_messages(),
                                                             max_tokens=1, temperature=0.0))
        return response.usage.prompt_tokens / seconds

    def direct_prompt() -> float:
        llama.reset()
        seconds, _ = timed(lambda: llama.create_completion(card, max_tokens=1, temperature=0.0))
        return len(card) / seconds

    def provider_generate() -> float:
        litellm.completion(model=local.MODEL, messages=story_messages(), max_tokens=1, temperature=0.0)  # cache the prompt
        seconds, response = timed(lambda: litellm.completion(model=local.MODEL, messages=story_messages(),
                                                             max_tokens=GENERATE, temperature=0.0))
        return response.usage.completion_tokens / seconds

    def direct_generate() -> float:
        llama.create_completion(story, max_tokens=1, temperature=0.0)
        seconds, output = timed(lambda: llama.create_completion(story, max_tokens=GENERATE, temperature=0.0,
                                                                repeat_penalty=1.0))
        return output["usage"]["completion_tokens"] / seconds

    rows = []
    for label, ours, theirs in (("prompt tokens/s", provider_prompt, direct_prompt),
                                ("generation tokens/s", provider_generate, direct_generate)):
        mine, direct = [], []
        for repeat in range(repeats):  # alternate which side goes first
            if repeat % 2:
                direct.append(theirs())
                mine.append(ours())
            else:
                mine.append(ours())
                direct.append(theirs())
        rows.append((label, statistics.median(mine), statistics.median(direct)))
    print(f"card prompt (system + user, no tool schema): {len(card)} tokens; generation: {GENERATE} tokens; median of {repeats}; "
          f"{len(os.sched_getaffinity(0))} threads")
    print(f"{'figure':<22} {'provider':>9} {'direct':>9} {'ratio':>7}")
    for label, mine, direct in rows:
        print(f"{label:<22} {mine:>9.1f} {direct:>9.1f} {mine / direct:>6.2f}x")


def suite_run() -> None:
    from optimizer import evaluate
    from optimizer.store import open_store
    from optimizer.config import load_settings

    with tempfile.TemporaryDirectory() as state:
        os.environ["OPTIMIZER_STATE_DIR"] = state
        settings = load_settings(ROOT, {"agent_model": "local/qwen2.5-coder-1.5b", "trials": 1, "cache": False})
        plan = evaluate.prepare(settings, ROOT, ["card_agent"])
        store = open_store(settings, ROOT)
        seconds, (run, summary) = timed(lambda: evaluate.execute(plan, store))
        prompt = sum(trial.transcript.usage.prompt_tokens for trial in run.trials)
        cached = sum(trial.transcript.usage.cached_prompt_tokens for trial in run.trials)
        totals = summary["totals"]
        print(f"card suite, {totals['trials']} trials, 1 per task: {seconds:.0f} s = "
              f"{seconds / totals['trials']:.1f} s per trial; {totals['model_calls']} model calls; "
              f"passed {totals['passed']}, errored {totals['errored']}")
        print(f"prompt tokens {prompt:,}, served from the reused prefix {cached:,} = {cached / max(prompt, 1):.0%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-suite", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from optimizer.models import install

    status = install.status()
    if not status.ready:
        sys.exit("the local model is not ready:\n" + "\n".join(status.lines()))
    throughput(args.repeats)
    if not args.skip_suite:
        suite_run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:,.0f} MB")


if __name__ == "__main__":
    main()
