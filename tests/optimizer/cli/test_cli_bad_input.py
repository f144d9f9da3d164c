"""Every bad input: one clear message naming the file/field, exit code 2, nothing in the store."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import event_task, write_suite


def assert_rejected(cli, state, args, *expected_fragments):
    code, out, err = cli(*args)
    assert code == 2, (code, out, err)
    for fragment in expected_fragments:
        assert fragment in err, f"{fragment!r} not in: {err}"
    assert err.count("error:") == 1
    assert not (state / "optimizer.db").exists(), "a rejected run must not create the store"


def test_malformed_task_json(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", {"tasks/broken.json": '{"id": "x", "graders": [}'})
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite), "--agent-model", "mock/oracle"],
                    "broken.json", "not valid JSON", "line 1")


def test_unknown_top_level_key(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(colour="blue")])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "card_event_standup.json", "'colour'",
                    "unknown key")


def test_wrong_type_names_the_field(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(timeout_seconds="fast")])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "field 'timeout_seconds'")


def test_unknown_grader(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(graders=[{"name": "card_vibes"}])])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "graders[0].name", "unknown grader 'card_vibes'")


def test_grader_config_of_the_wrong_type(cli, isolated, tmp_path):
    graders = [{"name": "card_template_choice", "config": {"expected_template_ids": "event"}}]
    suite = write_suite(tmp_path / "s", [event_task(graders=graders)])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)],
                    "graders[0].config.expected_template_ids", "card_event_standup.json")


@pytest.mark.parametrize("fixture_dir, says", [("tasks/nowhere/workspace", "not found"),
                                               ("../", "outside the suite folder")])
def test_missing_fixture_or_one_outside_the_suite(cli, isolated, tmp_path, fixture_dir, says):
    task = event_task()
    task["input"]["fixture_dir"] = fixture_dir
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "input.fixture_dir", says)


def test_missing_base_fixture(cli, isolated, tmp_path):
    task = event_task()
    task["input"]["base_fixture"] = "_no_such_pkm"
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "input.base_fixture", "_no_such_pkm")


@pytest.mark.parametrize("name", ["/etc", "../s", "fixtures/_starter_pkm"])
def test_a_base_fixture_given_as_a_path_is_refused(cli, isolated, tmp_path, name):
    """A base fixture is the name of a folder of the suite or of the project's fixtures: a path
    could copy any folder of the machine into the trial's workspace."""
    task = event_task()
    task["input"]["base_fixture"] = name
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "input.base_fixture", "is not a folder name")


def test_a_base_fixture_linked_to_a_folder_outside_the_project_is_refused(cli, isolated, tmp_path):
    task = event_task()
    task["input"]["base_fixture"] = "elsewhere"
    suite = write_suite(tmp_path / "s", [task])
    (tmp_path / "outside").mkdir()
    (suite / "elsewhere").symlink_to(tmp_path / "outside")
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "input.base_fixture", "outside the suite")


@pytest.mark.parametrize("bucket", ["/tmp/pwn", "../../x", "a/b", ".."])
def test_a_bucket_that_is_not_a_plain_name_is_refused(cli, isolated, tmp_path, bucket):
    """`graduate --apply` makes a folder of each bucket's name."""
    task = event_task()
    task["metadata"]["failure_bucket"] = bucket
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "metadata.failure_bucket", "not a plain name")


@pytest.mark.parametrize("where", ["task", "suite"])
def test_trials_per_run_past_its_bound_is_refused(cli, isolated, tmp_path, where):
    task = event_task(**({"trials_per_run": 100_000} if where == "task" else {}))
    suite = write_suite(tmp_path / "s", [task], **({"trials_per_run": 5000} if where == "suite" else {}))
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "trials_per_run", "1000")


def test_a_prompt_file_that_is_not_utf8_is_exit_2_naming_it(cli, isolated, tmp_path, monkeypatch):
    import shutil

    from tests.helpers import PROJECT_ROOT

    project = tmp_path / "project"
    for folder in ("suites", "agents", "fixtures", "prompt_manual"):
        shutil.copytree(PROJECT_ROOT / folder, project / folder)
    prompt = project / "agents" / "prompts" / "card_agent.md"
    prompt.write_bytes(prompt.read_bytes() + b"\xff\xfe not text\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(project))
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent", "--trials", "1"], "card_agent.md",
                    "not UTF-8 text", "save the file as UTF-8")


def test_duplicate_task_id(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", {"tasks/a.json": event_task("same"), "tasks/b.json": event_task("same")})
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "b.json", "duplicate task id 'same'", "a.json")


@pytest.mark.parametrize("model", ["mock/nonsense", "gpt4", "nosuchprovider/model-x"])
def test_unknown_model_string(cli, isolated, model):
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent", "--agent-model", model], "agent_model")


def test_remote_model_without_key(cli, isolated):
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent", "--agent-model", "openai/gpt-4o-mini"],
                    "OPENAI_API_KEY")


def test_zero_trials(cli, isolated):
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent", "--trials", "0"], "--trials")


def test_unknown_suite(cli, isolated):
    assert_rejected(cli, isolated, ["eval", "--suite", "no_such_suite"], "--suite", "no_such_suite")


def test_bad_metadata_split(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(metadata={"split": "dev"})])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "metadata", "holdout")


def test_bad_setting_in_environment(cli, isolated, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_CONCURRENCY", "many")
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "OPTIMIZER_CONCURRENCY")


def test_unknown_option_is_a_usage_error(cli, isolated):
    code, out, err = cli("eval", "--suite", "card_agent", "--no-such-flag")
    assert code == 2 and "No such option" in err and "Traceback" not in err
    assert not (isolated / "optimizer.db").exists()


def test_pkm_grader_config_outside_its_choices(cli, isolated, tmp_path):
    task = {"id": "pkm_x", "input": {"content": "hi", "base_fixture": "fresh"},
            "graders": [{"name": "pkm_completion", "config": {"expect": "maybe"}}]}
    suite = write_suite(tmp_path / "s", [task], agent_name="pkm_agent")
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "graders[0].config.expect", "pkm_completion")


def test_fact_id_that_is_not_a_date(cli, isolated, tmp_path):
    task = event_task()
    task["input"]["fact_id"] = "2026/13/45.md#ts_1"
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "input.fact_id", "2026/13/45 is not a date")


@pytest.mark.parametrize("url, says", [("notaurl", "not a database URL"), ("nosuchdialect://x/y", "not a database URL"),
                                       ("sqlite:////proc/no/such/folder/o.db", "cannot open the store")])
def test_database_url_that_cannot_be_opened(cli, isolated, monkeypatch, url, says):
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", url)
    assert_rejected(cli, isolated, ["history"], "database_url", says)


def test_database_driver_that_is_not_installed(cli, isolated, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg2", None)  # importing it raises ImportError, installed or not
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", "postgresql+psycopg2://user@localhost/db")
    assert_rejected(cli, isolated, ["history"], "database_url", "driver is not installed", "pip install")


def test_state_dir_that_cannot_be_made(cli, isolated, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("OPTIMIZER_STATE_DIR", str(blocker / "state"))
    assert_rejected(cli, isolated, ["history"], "state_dir", "cannot open the store")


def test_workspace_dir_that_does_not_exist(cli, isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIMIZER_WORKSPACE_DIR", str(tmp_path / "missing"))
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "workspace_dir", "does not exist")


def test_settings_section_that_is_not_a_table(cli, isolated, monkeypatch, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool]\noptimizer = 5\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path))
    assert_rejected(cli, isolated, ["history"], "pyproject.toml", "tool.optimizer", "must be a table")


@pytest.mark.parametrize("where, says", [("folder", "is a folder"), ("under-a-file", "is not a folder")])
def test_output_path_is_checked_before_any_trial(cli, isolated, tmp_path, where, says):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    target = tmp_path if where == "folder" else blocker / "out.json"
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--json", str(target))
    assert code == 2 and "--json" in err and says in err and "Traceback" not in err, (code, err)
    assert not (isolated / "optimizer.db").exists()


def test_unexpected_exception_is_a_harness_error(cli, isolated, monkeypatch):
    from optimizer.reporting import history

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(history, "load_history", broken)
    code, out, err = cli("history")
    assert code == 3, (code, err)
    assert "unexpected RuntimeError (a harness error): boom" in err and "Traceback" in err


def test_json_inside_a_fixture_folder_is_fixture_content_not_a_task(cli, isolated, tmp_path):
    task = event_task("with_fixture")
    task["input"]["fixture_dir"] = "tasks/group/with_fixture/workspace"
    suite = write_suite(tmp_path / "s", {"tasks/group/with_fixture/task.json": task,
                                         "tasks/group/with_fixture/workspace/a_settings.json": {"theme": "dark"},
                                         "tasks/group/with_fixture/workspace/Facts/notes.md": "- standup\n"})
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--trials", "1")
    assert code == 0, err
    assert "1 trials, 1 passed" in out


@pytest.mark.parametrize("kind", ["dangling link", "folder"])
def test_a_task_name_that_is_not_a_file_is_an_error(cli, isolated, tmp_path, kind):
    suite = write_suite(tmp_path / "s", [event_task()])
    odd = suite / "tasks" / "second.json"
    if kind == "folder":
        odd.mkdir()
    else:
        odd.symlink_to(tmp_path / "nowhere.json")
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "second.json", "not a file")


def test_every_problem_of_a_task_file_is_listed(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(timeout_seconds="fast", colour="blue", trials_per_run=0)])
    code, out, err = cli("eval", "--suite", str(suite))
    assert code == 2 and err.count("error:") == 1
    assert "timeout_seconds" in err and "'colour'" in err and "trials_per_run" in err
    assert "Value error" not in err


def test_a_suite_named_twice_runs_once(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task()])
    code, out, err = cli("eval", "--suite", str(suite), "--suite", str(suite), "--agent-model", "mock/oracle",
                         "--trials", "1")
    assert code == 0, err
    assert "1 trials, 1 passed" in out


def test_two_suites_with_one_name(cli, isolated, tmp_path):
    first = write_suite(tmp_path / "a", [event_task()], name="same")
    second = write_suite(tmp_path / "b", [event_task()], name="same")
    assert_rejected(cli, isolated, ["eval", "--suite", str(first), "--suite", str(second)],
                    "two suites are named 'same'", "field 'name'")


def test_settings_file_that_is_not_utf8(cli, isolated, monkeypatch, tmp_path):
    (tmp_path / "optimizer.toml").write_bytes(b"seed = 1 # \xff\xfe\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path))
    assert_rejected(cli, isolated, ["history"], "optimizer.toml", "not UTF-8", "save the file as UTF-8")


def test_graduate_names_an_unknown_bucket(cli, isolated):
    assert_rejected(cli, isolated, ["graduate", "--suite", "card_agent", "--bucket", "template_evnt"],
                    "field '--bucket'", "template_evnt", "card_agent/template_event")


@pytest.mark.parametrize("value", ["nan", "1.5", "-0.1"])
def test_fail_under_outside_zero_to_one(cli, isolated, value):
    code, out, err = cli("eval", "--suite", "card_agent", "--fail-under", value)
    assert code == 2 and "--fail-under" in err and "Traceback" not in err
    assert not (isolated / "optimizer.db").exists()


def test_a_grader_of_another_agent(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task(graders=[{"name": "pkm_completion"}])])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "graders[0].name", "grades the pkm_agent")


def test_project_root_that_is_not_a_folder(cli, isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path / "missing"))
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "OPTIMIZER_ROOT", "is not a folder")


def test_a_reference_solution_calling_a_tool_the_agent_lacks(cli, isolated, tmp_path):
    task = event_task()
    task["reference_solution"]["tool_calls"][0]["name"] = "save_card"
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "reference_solution.tool_calls[0].name",
                    "no tool 'save_card'", "save_timeline_card")


DEEP = 200_000
"""Levels of nesting in the absurd JSON below: parsed as is, it exhausts Python's stack."""


@pytest.mark.parametrize("command", [["suites", "validate"], ["eval", "--agent-model", "mock/oracle"]])
def test_a_task_file_nested_absurdly_deep_is_refused_naming_the_file(cli, isolated, tmp_path, command):
    deep = '{"id": "deep", "metadata": {"x": ' + "[" * DEEP + "]" * DEEP + "}}"
    suite = write_suite(tmp_path / "s", {"tasks/card_event_standup.json": event_task(), "tasks/deep.json": deep})
    assert_rejected(cli, isolated, [*command, "--suite", str(suite)], "deep.json", "nested too deep",
                    "more than 100 levels", "fix: flatten")


def test_a_suite_json_nested_absurdly_deep_is_refused_naming_the_file(cli, isolated, tmp_path):
    suite = write_suite(tmp_path / "s", [event_task()])
    (suite / "suite.json").write_text('{"name": "s", "agent_name": ' + "[" * DEEP + "]" * DEEP + "}")
    assert_rejected(cli, isolated, ["suites", "validate", "--suite", str(suite)], "suite.json", "nested too deep")


def test_a_task_file_over_the_size_limit_is_refused_naming_the_file(cli, isolated, tmp_path):
    from optimizer.files import MAX_INPUT_BYTES

    suite = write_suite(tmp_path / "s", [event_task(description="x" * MAX_INPUT_BYTES)])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite), "--agent-model", "mock/oracle"],
                    "card_event_standup.json", "too large", "more than 5 MB", "fix: keep it under 5 MB")


def test_a_misspelt_optimizer_variable_is_named_with_the_setting_it_is_close_to(cli, isolated, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_CONCURENCY", "4")
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "OPTIMIZER_CONCURENCY", "unknown variable",
                    "did you mean OPTIMIZER_CONCURRENCY?")


def test_an_unknown_optimizer_variable_is_refused_by_a_command_that_reads_no_settings(cli, isolated, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_MODEL_DIRR", "/tmp/models")
    assert_rejected(cli, isolated, ["suites", "validate", "--suite", "card_agent"], "OPTIMIZER_MODEL_DIRR",
                    "did you mean OPTIMIZER_MODEL_DIR", "known: OPTIMIZER_ABLATION_TRIALS, OPTIMIZER_AGENT_MODEL")


def test_the_optimizer_variables_that_are_not_settings_are_accepted(cli, isolated, monkeypatch, tmp_path):
    from optimizer.settings.sources import NOT_SETTINGS

    monkeypatch.setenv("OPTIMIZER_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("OPTIMIZER_PLAIN", "1")
    monkeypatch.setenv("OPTIMIZER_AIDER_VENV", str(tmp_path / "aider"))  # the aider test's own knob
    monkeypatch.setenv("OPTIMIZER_VIEWER_URL", "https://viewer.example")  # read by options (`envvar=`)
    monkeypatch.setenv("OPTIMIZER_VIEW_PORT", "0")
    assert {"OPTIMIZER_ROOT", "OPTIMIZER_MODEL_DIR", "OPTIMIZER_PLAIN", "OPTIMIZER_AIDER_VENV"} <= set(NOT_SETTINGS)
    code, out, err = cli("suites", "validate", "--suite", "card_agent")
    assert code == 0, err
    assert "25 score 1.0 under mock/oracle" in out


def test_every_variable_an_option_reads_is_accepted_by_the_check_of_the_environment():
    """An option declared with `envvar=OPTIMIZER_...` that the environment check refused would make
    the command that advertises it exit 2."""
    import typer

    from optimizer.cli import app
    from optimizer.settings.sources import ENV_PREFIX, NOT_SETTINGS, setting_names

    def options(command):
        yield from command.params
        for sub in getattr(command, "commands", {}).values():
            yield from options(sub)

    read = {name for param in options(typer.main.get_command(app))
            for name in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])}
    known = {ENV_PREFIX + name.upper() for name in setting_names()} | set(NOT_SETTINGS)
    assert {"OPTIMIZER_VIEWER_URL", "OPTIMIZER_VIEW_PORT"} <= read
    assert read - known == set()


def test_the_removed_processes_setting_is_refused_with_what_replaced_it(cli, isolated, monkeypatch, tmp_path):
    monkeypatch.setenv("OPTIMIZER_PROCESSES", "2")
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "OPTIMIZER_PROCESSES",
                    "the setting 'processes' was removed", "trials run on threads in one process")
    monkeypatch.delenv("OPTIMIZER_PROCESSES")
    (tmp_path / "optimizer.toml").write_text("processes = 2\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path))
    assert_rejected(cli, isolated, ["history"], "optimizer.toml", "the setting 'processes' was removed",
                    "delete the setting")


def bounded_settings() -> list[tuple[str, str]]:
    """(setting, a value past its upper bound) for every number a user sets."""
    from optimizer.settings.config import Settings

    rows = []
    for name, field in Settings.model_fields.items():
        high = next((getattr(rule, key) for rule in field.metadata for key in ("le", "lt")
                     if getattr(rule, key, None) is not None), None)
        if high is not None:
            rows.append((name, "inf" if isinstance(high, float) else str(high + 1)))
    return rows


def test_every_number_a_user_sets_has_an_upper_bound():
    from optimizer.settings.config import Settings

    numeric = {name for name, field in Settings.model_fields.items()
               if any(kind in str(field.annotation) for kind in ("int", "float")) and name != "model_prices"}
    assert numeric == {name for name, _ in bounded_settings()}


@pytest.mark.parametrize("name, value", bounded_settings())
def test_a_setting_past_its_bound_is_refused_with_its_range(cli, isolated, monkeypatch, name, value):
    variable = f"OPTIMIZER_{name.upper()}"
    monkeypatch.setenv(variable, value)
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], variable, "fix: use a value ",
                    "and below" if "alpha" in name else "and at most", "docs/settings.md#bounds")


@pytest.mark.parametrize("args, field, bound", [
    (["eval", "--suite", "card_agent", "--trials", "1000000000"], "--trials", "at most 1,000"),
    (["run", "--min-bucket-pairs", "1000000000"], "--min-bucket-pairs", "at most 10,000"),
    (["run", "--batch-pairs", "1000000000"], "--batch-pairs", "at most 1,000"),
    (["run", "--max-rollouts", "1000000000"], "--max-rollouts", "at most 100,000"),
    (["nightly", "--trials", "1000000000"], "--trials", "at most 1,000"),
], ids=["eval-trials", "min-bucket-pairs", "batch-pairs", "max-rollouts", "nightly-trials"])
def test_a_count_flag_past_its_bound_is_refused_before_anything_runs(cli, isolated, args, field, bound):
    assert_rejected(cli, isolated, args, f"field '{field}'", bound)


@pytest.mark.parametrize("args, flag", [(["nightly", "--max-iterations", "1000000000"], "--max-iterations"),
                                        (["nightly", "--patience", "1000000000"], "--patience"),
                                        (["noise", "--repeats", "1000000000"], "--repeats")])
def test_a_count_option_past_its_bound_is_a_usage_error(cli, isolated, args, flag):
    code, out, err = cli(*args)
    assert code == 2 and flag in err and "less than or equal to" in err and "Traceback" not in err, (code, err)
    assert not (isolated / "optimizer.db").exists()


@pytest.mark.parametrize("prices", ['{"mock/sim": [-1, 2]}', '{"mock/sim": [1, -0.5]}', '{"mock/sim": [NaN, 1]}',
                                    '{"mock/sim": [1, Infinity]}'])
def test_a_model_price_that_is_negative_or_not_a_number_is_refused(cli, isolated, monkeypatch, prices):
    monkeypatch.setenv("OPTIMIZER_MODEL_PRICES", prices)
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "OPTIMIZER_MODEL_PRICES",
                    "USD per million tokens, each from 0 to 10,000")
    if "NaN" in prices or "Infinity" in prices:
        code, out, err = cli("eval", "--suite", "card_agent")
        assert "a finite number" in err and "less than or equal" not in err, err


@pytest.mark.parametrize("flag, variable", [("--judge-model", None), (None, "OPTIMIZER_PATCHER_MODEL")])
def test_a_model_of_an_unknown_provider_is_refused_even_when_nothing_uses_it(cli, isolated, monkeypatch, flag,
                                                                              variable):
    args = ["eval", "--suite", "card_agent", "--agent-model", "mock/oracle", "--trials", "1"]
    if flag:
        args += [flag, "nope/x"]
    else:
        monkeypatch.setenv(variable, "nope/x")
    field = "judge_model" if flag else "patcher_model"
    assert_rejected(cli, isolated, args, f"field '{field}'", "does not know the provider of 'nope/x'")


@pytest.mark.parametrize("missing", ["input", "input.content"])
def test_a_task_without_its_note_is_refused_not_run_as_an_empty_note(cli, isolated, tmp_path, missing):
    task = event_task()
    if missing == "input":
        del task["input"]
        task["reference_solution"]["tool_calls"][0]["arguments"].pop("fact_id")
    else:
        del task["input"]["content"]
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite), "--agent-model", "mock/oracle"],
                    "card_event_standup.json", f"field '{missing}'", "runs as an empty note", 'fix: add "input": {"content":')


def test_an_explicitly_empty_note_runs(cli, isolated, tmp_path):
    task = event_task()
    task["input"]["content"] = ""
    suite = write_suite(tmp_path / "s", [task])
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--trials", "1")
    assert code == 0, err


def test_an_empty_list_of_suites_is_refused_not_read_as_the_default(cli, isolated, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_SUITES", ",,")
    assert_rejected(cli, isolated, ["eval"], "OPTIMIZER_SUITES", "at least 1 item", "fix: name at least one")


def test_files_that_start_with_a_byte_order_mark_are_read(cli, isolated, tmp_path, monkeypatch):
    suite = write_suite(tmp_path / "s", [event_task()])
    bom = "\ufeff"
    for path in (suite / "suite.json", suite / "tasks" / "card_event_standup.json"):
        path.write_text(bom + path.read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "mock/oracle", "--trials", "1")
    assert code == 0, err
    assert "1 trials, 1 passed" in out


def test_a_night_whose_proposer_cannot_run_is_refused_before_it_makes_a_branch_or_a_record(cli, repo, isolated,
                                                                                         monkeypatch):
    from tests.helpers import git

    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")  # and no proposer_command
    branches = git(repo, "branch", "--list")
    code, out, err = cli("nightly", "--trials", "1", "--max-iterations", "1")
    assert code == 2 and "proposer_command" in err and "needs a command line" in err
    assert git(repo, "branch", "--list") == branches
    code, out, err = cli("history", "--json", str(isolated.parent / "history.json"))
    assert code == 0, err
    assert json.loads((isolated.parent / "history.json").read_text())["nightlies"] == []


@pytest.mark.parametrize("state_dir", ["", ".", ".."])
def test_a_state_folder_that_is_the_project_or_holds_it_is_refused(cli, isolated, monkeypatch, tmp_path, state_dir):
    """Its `.gitignore` of `*` would hide every new file of the project from git."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "optimizer.toml").write_text(f'state_dir = "{state_dir}"\n')
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path / "project"))
    monkeypatch.delenv("OPTIMIZER_STATE_DIR")
    code, out, err = cli("eval", "--suite", "card_agent")
    assert code == 2 and "state_dir" in err and "is the project folder" in err, err
    assert not (tmp_path / "project" / ".gitignore").exists() and not (tmp_path / "project" / "optimizer.db").exists()


def test_a_tool_optimizer_table_in_optimizer_toml_is_refused_saying_where_settings_go(cli, isolated, monkeypatch,
                                                                                       tmp_path):
    (tmp_path / "optimizer.toml").write_text("[tool.optimizer]\nconcurrency = 2\n")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(tmp_path))
    assert_rejected(cli, isolated, ["eval", "--suite", "card_agent"], "optimizer.toml", "unknown setting 'tool'",
                    "holds the settings at its top level")


def test_a_template_id_no_card_can_have_is_refused_at_load(cli, isolated, tmp_path):
    """A typo in `expected_template_ids` would make a grader that can never pass."""
    task = event_task(graders=[{"name": "card_template_choice", "config": {"expected_template_ids": ["Event"]}}])
    suite = write_suite(tmp_path / "s", [task])
    assert_rejected(cli, isolated, ["eval", "--suite", str(suite)], "expected_template_ids", "'Event'",
                    "the card format's ids are link, person")
