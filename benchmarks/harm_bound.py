"""How many pairs the harm test needs to catch the card suite's planted harmful patch on its
one-task bucket: the simulator's pass rates for multi_fact_day with the base prompt and with the
harmful one (the target's rule plus a contradiction of multi_fact_day), the chance that a pair
drops, rises or ties, and, for each number of fresh pairs, how often the sign bets reach the
Bonferroni threshold of one group among `--groups` at `--alpha-harm`. Prints a table; asserts
nothing. docs/gate.md reads it as a bound on what the per-proposal budget can buy.

    .venv/bin/python benchmarks/harm_bound.py [--groups 14] [--alpha-harm 0.10] [--runs 4000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gate_power  # noqa: E402

from optimizer.registry import get_agent  # noqa: E402
from optimizer.trials.runner import plan  # noqa: E402
from optimizer.stats import HARM_GRID, wealth_path  # noqa: E402
from optimizer.suites import load_suites  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=14)
    parser.add_argument("--alpha-harm", type=float, default=0.10)
    parser.add_argument("--runs", type=int, default=4000)
    args = parser.parse_args()
    suites = load_suites(["card_agent"], ROOT)
    entry = get_agent("card_agent")
    base = (ROOT / entry.prompt_file).read_text(encoding="utf-8")
    rules = entry.sim_profile.rule_texts
    harmful = gate_power.with_lines(base, rules.rules["trivial_input"], rules.contradictions["multi_fact_day"])
    sim = gate_power.FastSim(suites, gate_power.failing_scores(["card_agent"], trials=4))
    item = next(i for i in plan(suites, trials=1) if i.task.bucket == "multi_fact_day")
    before, after = sim.probability(item, base), sim.probability(item, harmful)
    drop, rise = before * (1 - after), after * (1 - before)
    print(f"multi_fact_day pass rate: base {before:.3f}, harmful {after:.3f}")
    print(f"a pair drops {drop:.3f}, rises {rise:.3f}, ties {1 - drop - rise:.3f}")
    threshold = args.groups / args.alpha_harm
    rng = np.random.default_rng(0)
    print(f"\n{'pairs':>5}  caught (wealth >= {threshold:.0f})")
    for pairs in range(8, 81, 8):
        caught = 0
        for _ in range(args.runs):
            draws = rng.random(pairs)
            signs = [1.0 if u < drop else -1.0 for u in draws if u < drop + rise]  # +1: a drop
            path = wealth_path(signs, HARM_GRID)
            caught += bool(path.size and path.max() >= threshold)
        print(f"{pairs:>5}  {caught / args.runs:6.1%}")


if __name__ == "__main__":
    main()
