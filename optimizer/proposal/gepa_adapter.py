"""Everything the optimizer takes from the `gepa` package, in one place.

`search.py` drives gepa's search with our runner and proposers; it needs a few names gepa does not
export from its top level (its evaluation batch, its Pareto parent choice, the selector protocol,
its saved state and that state's file name). They are private to gepa and may move in any
release, so they are named here only, pyproject pins gepa to the releases checked, and
`tests/optimizer/proposal/test_gepa_adapter.py` checks the installed gepa still has each and behaves as used.

gepa is imported inside each function: importing this module (and `search.py`) costs nothing
for commands that never search.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

STATE_FILE = "gepa_state.bin"
"""The file gepa writes its resumable state to inside `run_dir`."""


def optimize(**options: Any) -> Any:
    """`gepa.optimize` with `options` as given; returns its `GEPAResult`."""
    import gepa

    return gepa.optimize(**options)


def evaluation_batch(outputs: list[Any], scores: list[float], trajectories: list[Any] | None) -> Any:
    """The value an adapter's `evaluate` returns to gepa."""
    from gepa.core.adapter import EvaluationBatch

    return EvaluationBatch(outputs=outputs, scores=scores, trajectories=trajectories)


def spent_evaluations(run_dir: Path) -> int:
    """How many metric calls a search saved in `run_dir` already spent (0 when none was saved):
    a continued search's budget counts from there."""
    if not (run_dir / STATE_FILE).is_file():
        return 0
    from gepa.core.state import GEPAState

    return GEPAState.load(str(run_dir)).total_num_evals


def pareto_parent(fronts: Mapping[Any, set[int]], scores: list[float], rng: random.Random) -> int:
    """gepa's own choice of a parent among the programs on the Pareto fronts `fronts`."""
    from gepa.gepa_utils import select_program_candidate_from_pareto_front

    return select_program_candidate_from_pareto_front(fronts, scores, rng)


def candidate_selector(select: Callable[[Any], int]) -> Any:
    """A gepa `CandidateSelector` whose choice of the next parent is `select(state)`."""
    from gepa.proposer.reflective_mutation.base import CandidateSelector

    class Selector(CandidateSelector):
        def select_candidate_idx(self, state) -> int:
            return select(state)

    return Selector()
