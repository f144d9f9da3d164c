"""`optimizer suites validate` and suite loading: a task with no reference solution is reported as not
checked (the oracle has nothing to replay), never as failed; a task with no failure bucket is refused."""

from __future__ import annotations

import itertools

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


def test_a_task_without_a_failure_bucket_is_refused_naming_the_file_and_the_field(cli, isolated, tmp_path):
    loose = event_task("card_event_loose", metadata={"split": "train"})
    suite = write_suite(tmp_path / "s", [event_task(), loose])
    for command in (["suites", "validate"], ["eval", "--agent-model", "mock/oracle"]):
        code, out, err = cli(*command, "--suite", str(suite))
        assert code == 2, out + err
        assert "card_event_loose.json" in err and "metadata.failure_bucket" in err
        assert '"failure_bucket"' in err and "unbucketed" not in out + err


def test_the_task_file_reference_in_the_plugin_docs_is_the_table_the_loader_models_generate():
    from optimizer.task_format import table
    from tests.conftest import PROJECT_ROOT

    doc = (PROJECT_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    lines = doc[doc.index("| Field | Type | Default | Meaning |"):].splitlines()
    documented = "".join(line + "\n" for line in itertools.takewhile(lambda line: line.startswith("|"), lines))
    assert documented == table()
    assert "| `metadata.failure_bucket` | `str` | required |" in table()
    assert "| `input.fixture_dir` | `str \\| None` | `None` |" in table()
    assert "| `timeout_seconds` | `int` (at least 1) | `300` | Wall-clock limit" in table()


def test_mock_sim_on_an_agent_without_a_simulation_profile_is_a_configuration_error_naming_the_fix(
        cli, isolated, monkeypatch):
    import dataclasses

    from optimizer import registry

    registry.load_plugins()
    monkeypatch.setitem(registry._agents, "card_agent",
                        dataclasses.replace(registry.get_agent("card_agent"), sim_profile=None))
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "1")
    assert code == 2, out + err
    assert "agent_model" in err and "no simulation profile" in err and "mock/oracle" in err
    assert "network" not in err and "key" not in err.replace("keep", "")
