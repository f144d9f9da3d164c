"""The contract with the installed gepa (`optimizer.proposal.gepa_adapter`): the only module that imports
gepa, the release range pyproject pins, and each private name the search relies on existing and
behaving as `optimizer.proposal.search` uses it (a toy search on a scripted adapter, no model)."""

from __future__ import annotations

import ast
import random
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

from optimizer.proposal import gepa_adapter
from tests.conftest import PROJECT_ROOT as ROOT


def gepa_importers() -> set[str]:
    found = set()
    for folder in ("optimizer", "agents", "graders", "outcomes", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                if any(name == "gepa" or name.startswith("gepa.") for name in names):
                    found.add(path.relative_to(ROOT).as_posix())
    return found


class Scripted:
    """A gepa adapter whose score of an example is 1 when the prompt holds that example's word."""

    def __init__(self):
        self.propose_new_texts = None

    def evaluate(self, batch, candidate, capture_traces=False):
        scores = [1.0 if word in candidate["prompt"] else 0.0 for word in batch]
        return gepa_adapter.evaluation_batch(list(batch), scores, list(batch) if capture_traces else None)

    def make_reflective_dataset(self, candidate, eval_batch, components_to_update):
        return {name: [{"missing": word} for word in eval_batch.trajectories or []] for name in components_to_update}


def add_missing(candidate, reflective_dataset, components_to_update):
    missing = [row["missing"] for row in reflective_dataset["prompt"] if row["missing"] not in candidate["prompt"]]
    return {"prompt": candidate["prompt"] + " " + missing[0]} if missing else {}


def toy_search(run_dir: Path, budget: int, **options):
    words = ["alpha", "beta", "gamma"]
    return gepa_adapter.optimize(seed_candidate={"prompt": "base"}, trainset=words, valset=words, adapter=Scripted(),
                                 custom_candidate_proposer=add_missing, reflection_minibatch_size=2,
                                 max_metric_calls=budget, run_dir=str(run_dir), seed=0, display_progress_bar=False,
                                 raise_on_exception=True, **options)


def test_only_the_adapter_module_imports_gepa():
    assert gepa_importers() == {"optimizer/proposal/gepa_adapter.py"}


def test_the_installed_gepa_is_a_release_pyproject_pins_as_a_direct_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [Requirement(line) for line in project["dependencies"] if Requirement(line).name == "gepa"]
    assert len(pins) == 1 and pins[0].specifier, "gepa is pinned once, to a range"
    assert pins[0].specifier.contains(version("gepa"))


def test_a_saved_search_reports_the_evaluations_it_spent_in_its_state_file(tmp_path):
    assert gepa_adapter.spent_evaluations(tmp_path) == 0
    result = toy_search(tmp_path, budget=20)
    assert (tmp_path / gepa_adapter.STATE_FILE).is_file()
    assert gepa_adapter.spent_evaluations(tmp_path) == result.total_metric_calls >= 20
    assert any("alpha" in candidate["prompt"] for candidate in result.candidates)


def test_pareto_parent_chooses_only_among_the_programs_on_the_fronts():
    rng = random.Random(0)
    fronts = {"alpha": {2}, "beta": {2, 3}}
    chosen = {gepa_adapter.pareto_parent(fronts, [0.9, 0.8, 0.1, 0.2], rng) for _ in range(50)}
    assert chosen <= {2, 3} and 2 in chosen


def test_a_candidate_selector_is_asked_for_every_parent_with_the_state_search_reads(tmp_path):
    seen = []

    def select(state):
        fronts = state.get_pareto_front_mapping()
        seen.append((len(state.program_candidates), len(state.per_program_tracked_scores),
                     all(isinstance(programs, set) for programs in fronts.values())))
        return 0

    toy_search(tmp_path, budget=20, candidate_selection_strategy=gepa_adapter.candidate_selector(select))
    assert seen and all(count == scores and sets for count, scores, sets in seen)
