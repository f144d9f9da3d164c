"""Which constant bets the sequential sign tests should average: how often each grid reaches the
gate's thresholds within a number of pairs, on pass rates taken from the card suite's simulator.
Prints a table; asserts nothing. docs/gate.md reads it for the
choice of `optimizer.stats.IMPROVE_GRID` and `HARM_GRID`.

    .venv/bin/python benchmarks/bet_grid.py [--runs 20000]

Each row is one comparison: a pair's two trials pass independently at the base and candidate
rates; a pair whose trials differ is a bet (a rise for an improvement test, a drop for a harm
test), and the test succeeds when the grid's averaged wealth reaches the threshold (20 for an
improvement at alpha 0.05; 140 for one harm group among 14 at alpha_harm 0.10).
"""

from __future__ import annotations

import argparse

import numpy as np

GRIDS = {"0.2 0.4 0.6 0.8": (0.2, 0.4, 0.6, 0.8), "0.4 0.7": (0.4, 0.7), "0.5 0.75": (0.5, 0.75),
         "0.6": (0.6,), "0.1 0.3 0.5 0.7 0.9": (0.1, 0.3, 0.5, 0.7, 0.9)}
CASES = [  # (label, base pass rate, candidate pass rate, pairs, threshold)
    ("template_quote rule +0.27", 0.65, 0.92, 32, 20),
    ("template_quote rule +0.27", 0.65, 0.92, 48, 20),
    ("template_place rule +0.32", 0.60, 0.92, 32, 20),
    ("trivial_input rule +0.57", 0.35, 0.92, 16, 20),
    ("a rule +0.15", 0.50, 0.65, 48, 20),
    ("multi_fact_day broken -0.47", 0.55, 0.08, 24, 140),
    ("multi_fact_day broken -0.47", 0.55, 0.08, 32, 140),
    ("a bucket hurt -0.20", 0.55, 0.35, 48, 140),
    ("A/A (no change), 8 pairs", 0.55, 0.55, 8, 20),
    ("A/A (no change), 64 pairs", 0.55, 0.55, 64, 20),
]


def reached(base: float, candidate: float, pairs: int, threshold: float, grid: tuple[float, ...], runs: int,
            rng: np.random.Generator) -> float:
    up = candidate >= base
    before = rng.random((runs, pairs)) < base
    after = rng.random((runs, pairs)) < candidate
    moves = after.astype(float) - before.astype(float)
    bets = moves if up else -moves
    logs = np.cumsum(np.log1p(bets[:, :, None] * np.asarray(grid)[None, None, :]), axis=1)
    wealth = np.exp(logs).mean(axis=2)
    return float((wealth.max(axis=1) >= threshold).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'case':<30} {'pairs':>5} {'wealth':>6}  " + "  ".join(f"{name:>19}" for name in GRIDS))
    for label, base, candidate, pairs, threshold in CASES:
        cells = [reached(base, candidate, pairs, threshold, grid, args.runs, rng) for grid in GRIDS.values()]
        print(f"{label:<30} {pairs:>5} {threshold:>6}  " + "  ".join(f"{cell:>19.1%}" for cell in cells))


if __name__ == "__main__":
    main()
