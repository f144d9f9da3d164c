"""`benchmarks/pkm_closest.py`: where the closest files put a note's place, and whether the first
of them is a place the task's routing grader passes."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from optimizer.suites import load_suite
from tests.conftest import PROJECT_ROOT


@pytest.fixture(scope="module")
def closest():
    path = PROJECT_ROOT / "benchmarks" / "pkm_closest.py"
    spec = importlib.util.spec_from_file_location("benchmark_pkm_closest", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def tasks():
    return {task.id: task for task in load_suite("pkm_agent", PROJECT_ROOT).tasks}


@pytest.mark.parametrize("task_id, rank, right", [
    ("pkm_route_one_on_one_secondment", "1", True),   # its file is shown first
    ("pkm_subfile_japan_rail_budget", "2", True),     # the first shown file is in the right folder
    ("pkm_create_bike_brake_bleed", "new file", False),  # its file does not exist yet
    ("pkm_consolidate_recipes_nikujaga", "new file", False),  # right folder, but the task wants the file
])
def test_the_first_shown_file_is_graded_as_the_routing_grader_would(closest, tasks, task_id, rank, right):
    task = tasks[task_id]
    assert closest.rank(task, PROJECT_ROOT) == rank
    assert closest.first_is_right(task, PROJECT_ROOT) is right
