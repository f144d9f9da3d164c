"""`optimizer suites validate` on a task with no reference solution: the oracle has nothing to
replay, so the task is reported as not checked (naming the fix), never as a failed task."""

from __future__ import annotations

from tests.helpers import event_task, write_suite


def test_a_task_without_a_reference_solution_is_reported_as_not_replayed_not_failed(cli, isolated, tmp_path):
    bare = event_task("card_event_bare")
    del bare["reference_solution"]
    suite = write_suite(tmp_path / "s", [event_task(), bare])
    code, out, err = cli("suites", "validate", "--suite", str(suite))
    assert code == 0, out + err
    assert "tmp_suite: 2 tasks, ok, 1 with no reference solution to replay" in out
    assert "card_event_bare: no reference solution to replay (add reference_solution.tool_calls" in out
    assert "failed" not in out and "failing" not in out
    assert "2 tasks in 1 suite(s); 1 score 1.0 under mock/oracle; 1 not checked: no reference solution" in out


def test_a_task_whose_reference_solution_falls_short_still_fails(cli, isolated, tmp_path):
    short = event_task("card_event_short")
    short["graders"][2]["config"]["substrings"] = ["10:30", "a word the reference never writes"]
    suite = write_suite(tmp_path / "s", [short])
    code, out, err = cli("suites", "validate", "--suite", str(suite))
    assert code != 0
    assert "tmp_suite: 1 tasks, 1 failing" in out and "card_event_short: failed" in out
    assert "no reference solution" not in out
