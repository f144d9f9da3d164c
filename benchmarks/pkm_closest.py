"""Where the PKM Agent's "closest files" (agents/pkm/filing.py's `ranked`) put the file a note
belongs in: for every task of a PKM suite whose reference outcome names files, the rank of the
first named file among the files shown (1-3, or "-" when it is not shown), over the task's own
knowledge base. No model is called. A task whose file does not exist yet (a new project, an
archived one, a merged file) cannot be ranked; its line says "new file". Prints a table and the
counts; asserts nothing.

    .venv/bin/python benchmarks/pkm_closest.py [--suite pkm_agent]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from optimizer.suites import fixture_paths, load_suite  # noqa: E402
from prompt_optimizer_agents.pkm import filing  # noqa: E402

def rank(task, project_root: Path) -> str:
    """The first expected file's place among the shown files, "-" when not shown, "new file"
    when no such file is in the task's knowledge base."""
    expected = task.reference_solution.expected_outcome.get("files") or []
    knowledge_bases = [path / "PKM" for path in fixture_paths(task, project_root) if (path / "PKM").is_dir()]
    if not knowledge_bases or not (knowledge_bases[-1] / expected[0]).is_file():
        return "new file"
    paths = [path for path, _ in filing.ranked(knowledge_bases[-1], task.input.content)]
    return str(paths.index(expected[0]) + 1) if expected[0] in paths else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="pkm_agent")
    args = parser.parse_args()
    suite = load_suite(args.suite, ROOT)
    ranks = {}
    for task in suite.tasks:
        outcome = task.reference_solution.expected_outcome if task.reference_solution else None
        if outcome and outcome.get("files"):
            ranks[task.id] = rank(task, ROOT)
            print(f"{task.id:40} {ranks[task.id]}")
    ranked = [value for value in ranks.values() if value != "new file"]
    print(f"{len(ranks)} tasks name files; {len(ranked)} of those files exist before the note: "
          f"first {ranked.count('1')}, among the {filing.CLOSEST} shown "
          f"{sum(value.isdigit() for value in ranked)}, not shown {ranked.count('-')}")


if __name__ == "__main__":
    main()
