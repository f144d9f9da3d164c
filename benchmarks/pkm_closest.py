"""Where the PKM Agent's "closest files" (agents/pkm/filing.py's `ranked`) put the file a note
belongs in: for every task of a PKM suite whose reference outcome names files, the rank of the
first named file among the files shown (1-3, or "-" when it is not shown), over the task's own
knowledge base. No model is called. A task whose file does not exist yet (a new project, an
archived one, a merged file) cannot be ranked; its line says "new file". Beside it, whether the
first shown file is a place the task's routing grader passes (the file, or a file in the right
folder): how often an agent that always files in the first closest file would be right. Prints
a table and the counts; asserts nothing.

    .venv/bin/python benchmarks/pkm_closest.py [--suite pkm_agent]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prompt_optimizer_graders.pkm import RoutingConfig, place_score  # noqa: E402
from optimizer.registry import get_grader  # noqa: E402
from optimizer.suites import fixture_paths, load_suite  # noqa: E402
from prompt_optimizer_agents.pkm import filing  # noqa: E402

def shown(task, project_root: Path) -> tuple[Path | None, list[str]]:
    """The task's knowledge base and the files `ranked` shows for its note, first first."""
    knowledge_bases = [path / "PKM" for path in fixture_paths(task, project_root) if (path / "PKM").is_dir()]
    if not knowledge_bases:
        return None, []
    return knowledge_bases[-1], [path for path, _ in filing.ranked(knowledge_bases[-1], task.input.content)]


def rank(task, knowledge_base: Path | None, paths: list[str]) -> str:
    """The first expected file's place among the shown files (`shown`), "-" when not shown, "new
    file" when no such file is in the task's knowledge base."""
    expected = task.reference_solution.expected_outcome.get("files") or []
    if knowledge_base is None or not (knowledge_base / expected[0]).is_file():
        return "new file"
    return str(paths.index(expected[0]) + 1) if expected[0] in paths else "-"


def first_is_right(task, paths: list[str]) -> bool:
    """Whether the routing grader, as the task configures it, passes the first shown file."""
    spec = next((one for one in task.graders if one.name == "pkm_routed_correctly"), None)
    if not paths or spec is None:
        return False
    config = RoutingConfig.model_validate(get_grader(spec.name).task_config(task, spec.config))
    return place_score(paths[0], config) >= config.min_score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="pkm_agent")
    args = parser.parse_args()
    suite = load_suite(args.suite, ROOT)
    ranks, right = {}, {}
    print(f"{'task':40} {'split':8} rank  first shown graded right")
    for task in suite.tasks:
        outcome = task.reference_solution.expected_outcome if task.reference_solution else None
        if outcome and outcome.get("files"):
            knowledge_base, paths = shown(task, ROOT)
            ranks[task.id], right[task.id] = rank(task, knowledge_base, paths), first_is_right(task, paths)
            print(f"{task.id:40} {task.split:8} {ranks[task.id]:5} {'yes' if right[task.id] else 'no'}")
    ranked = [value for value in ranks.values() if value != "new file"]
    print(f"{len(ranks)} tasks name files; {len(ranked)} of those files exist before the note: "
          f"first {ranked.count('1')}, among the {filing.CLOSEST} shown "
          f"{sum(value.isdigit() for value in ranked)}, not shown {ranked.count('-')}")
    print(f"the first shown file is graded right for {sum(right.values())} of {len(right)}")


if __name__ == "__main__":
    main()
