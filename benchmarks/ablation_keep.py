"""How often the ablation keeps a changed part that does nothing, and one that helps.

A part is undone and both prompts run `--trials` screening trials of a targeted bucket; the
part is kept when `optimizer.proposal.ablation.removal_p` is at most `KEEP_BELOW` (the level a part
beside a target's surest one must pass), at 0.10 (the earlier level), or, for comparison, when the
mean score or the pass rate drops by more than 0.05 (the first rule). Trials pass with the given
rates; a failed trial keeps `--credit` of the score (partial credit).

Then the case that matters: a patch of a right rule and a line that does nothing for the target,
screened with `ablate` itself (the two removals share the whole patch's trials), and how often
the line is kept, at the level in use and at 0.10.

    python benchmarks/ablation_keep.py [--trials 16] [--repeats 4000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.proposal.ablation import KEEP_BELOW, removal_p  # noqa: E402

CASES = [("does nothing", 0.50, 0.50), ("does nothing", 0.92, 0.92), ("does nothing", 0.70, 0.70),
         ("lifts 0.50 -> 0.92", 0.92, 0.50), ("lifts 0.70 -> 0.92", 0.92, 0.70), ("lifts 0.80 -> 0.92", 0.92, 0.80)]
"""(what the part does, pass rate with it, pass rate without it)."""


def draw(rng: random.Random, rate: float, trials: int, credit: float) -> list[tuple[float, float]]:
    passed = [rng.random() < rate for _ in range(trials)]
    return [(1.0 if ok else credit, float(ok)) for ok in passed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=4000)
    parser.add_argument("--credit", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{args.trials} screening trials a side, {args.repeats} repeats, failed trials keep {args.credit} of the score")
    print(f"{'part':<20} {'with':>5} {'without':>8} {'kept (p <= ' + str(KEEP_BELOW) + ')':>17} "
          f"{'kept (p <= 0.10)':>17} {'kept (margin 0.05)':>19}")
    for name, with_rate, without_rate in CASES:
        by_test = by_earlier = by_margin = 0
        for _ in range(args.repeats):
            whole = {"s/a": draw(rng, with_rate, args.trials, args.credit)}
            without = {"s/a": draw(rng, without_rate, args.trials, args.credit)}
            found = removal_p(whole, without)
            by_test += found <= KEEP_BELOW
            by_earlier += found <= 0.10
            drop = max(sum(s for s, _ in whole["s/a"]) - sum(s for s, _ in without["s/a"]),
                       sum(p for _, p in whole["s/a"]) - sum(p for _, p in without["s/a"])) / args.trials
            by_margin += drop > 0.05
        print(f"{name:<20} {with_rate:>5.2f} {without_rate:>8.2f} {by_test / args.repeats:>17.1%} "
              f"{by_earlier / args.repeats:>17.1%} {by_margin / args.repeats:>19.1%}")
    beside_a_rule(rng, args)


def beside_a_rule(rng: random.Random, args) -> None:
    """A right rule (0.65 -> 0.92) and a line that does nothing for the target, through `ablate`."""
    import optimizer.proposal.ablation as ablation

    base, patched = "Base.\n", "Base.\nRULE\nLINE\n"

    def score(prompt: str, label: str):
        return {"s/a": draw(rng, 0.92 if "RULE" in prompt else 0.65, args.trials, args.credit)}

    print(f"\na right rule (0.65 -> 0.92) beside a line that does nothing, {args.repeats} patches:")
    for level in (KEEP_BELOW, 0.10):
        ablation.KEEP_BELOW = level
        line = rule = 0
        for _ in range(args.repeats):
            kept = ablation.ablate(base, patched, score).text
            line += "LINE" in kept
            rule += "RULE" in kept
        print(f"  others kept at p <= {level}: the line kept {line / args.repeats:.1%}, the rule kept {rule / args.repeats:.1%}")
    ablation.KEEP_BELOW = KEEP_BELOW


if __name__ == "__main__":
    main()
