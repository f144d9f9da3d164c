"""`benchmarks/pkm_closest.py`: where the closest files put a note's place, and whether the first
of them is a place the task's routing grader passes."""

from __future__ import annotations

import pytest

from optimizer.suites import load_suite
from tests.conftest import PROJECT_ROOT
from tests.helpers import benchmark_module


@pytest.fixture(scope="module")
def closest():
    yield from benchmark_module("pkm_closest")


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
    knowledge_base, paths = closest.shown(task, PROJECT_ROOT)
    assert closest.rank(task, knowledge_base, paths) == rank
    assert closest.first_is_right(task, paths) is right
