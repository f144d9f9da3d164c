"""The run spec: every input that shapes a run's results is recorded with the run, and a stored
baseline is reused only when all of them are unchanged (`optimizer run --dry-run` twice in a
throw-away repository, the second one after one edit)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest

from optimizer.trials import judging
from optimizer.provenance import RunSpec
from optimizer.reporting.recorded_spec import SPEC_PARTS, changed_parts, short_spec
from tests.conftest import PROJECT_ROOT
from tests.helpers import git, project_repo

CARD_GRADERS = ("card_completion", "card_template_choice", "card_must_contain", "card_tags")
FIXTURE = "suites/card_agent/tasks/positive/card_multi_fact_call_mom/workspace"


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = project_repo(tmp_path / "repo", {"notes.txt": "committed\n"})
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    monkeypatch.setenv("OPTIMIZER_PATCHER_MODEL", "mock/patcher")
    return root


def baseline_run(cli, *args: str) -> bool:
    """Run `optimizer run --dry-run`; whether its baseline reused a stored run."""
    code, out, err = cli("run", "--dry-run", *args)
    assert code == 0, out + err
    return "reusing run" in out + err


def baselines(cli, tmp_path: Path) -> list[dict]:
    """The baseline rows of `optimizer history --json`, oldest first."""
    path = tmp_path / "history.json"
    code, out, err = cli("history", "--json", str(path))
    assert code == 0, out + err
    return [row for row in json.loads(path.read_text())["runs"] if row["kind"] == "baseline"]


def code_copy(tmp_path: Path, monkeypatch, package: str) -> Path:
    """A copy of an imported package's folder, which the process now reads as that package's
    source (the modules already loaded stay as they are)."""
    module = sys.modules[package]
    copy = tmp_path / "code" / package.replace(".", "/")
    shutil.copytree(Path(module.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(module, "__file__", str(copy / "__init__.py"))
    return copy


def test_an_unchanged_project_reuses_its_baseline(cli, repo, tmp_path):
    assert not baseline_run(cli)
    assert baseline_run(cli)
    assert len(baselines(cli, tmp_path)) == 1  # the reused run is not run again


def test_an_edit_to_the_agents_code_runs_a_new_baseline(cli, repo, tmp_path, monkeypatch):
    copy = code_copy(tmp_path, monkeypatch, "prompt_optimizer_agents.card")
    assert not baseline_run(cli)
    with (copy / "templates.py").open("a") as file:
        file.write("\nEXTRA_TEMPLATE = 'agenda'\n")
    assert not baseline_run(cli)
    assert baselines(cli, tmp_path)[-1]["spec_changes"] == "agents.card_agent.code"


def test_an_edit_to_the_agents_tool_schema_runs_a_new_baseline(cli, repo, tmp_path, monkeypatch):
    copy = code_copy(tmp_path, monkeypatch, "prompt_optimizer_agents.card")
    assert not baseline_run(cli)
    schema = json.loads((copy / "save_timeline_card.json").read_text())
    schema["description"] = "Save one timeline card (described differently)."
    (copy / "save_timeline_card.json").write_text(json.dumps(schema))
    assert not baseline_run(cli)
    assert baselines(cli, tmp_path)[-1]["spec_changes"] == "agents.card_agent.schemas"


def test_an_edit_to_a_fixture_file_runs_a_new_baseline(cli, repo, tmp_path):
    assert not baseline_run(cli)
    note = next(path for path in sorted((repo / FIXTURE).rglob("*")) if path.is_file())
    note.write_text(note.read_text() + "\nCall the dentist too.\n")
    git(repo, "commit", "-qam", "a longer note")
    assert not baseline_run(cli)
    changes = baselines(cli, tmp_path)[-1]["spec_changes"].split(", ")
    assert changes == ["git.commit", "tasks.card_agent/card_multi_fact_call_mom.fixtures"]


def test_an_agent_package_installed_under_another_name_hashes_the_texts_inside_it(tmp_path, monkeypatch):
    """A wheel installs the folder `agents/` as `prompt_optimizer_agents`, its prompt folder
    `agents/prompts` inside that package: an edit to a text there changes the agent's spec."""
    from optimizer.provenance import agent_spec
    from optimizer.registry import get_agent

    entry = get_agent("card_agent")
    copy = code_copy(tmp_path, monkeypatch, "prompt_optimizer_agents")
    monkeypatch.setattr(sys.modules["prompt_optimizer_agents.card"], "__file__", str(copy / "card" / "__init__.py"))
    assert not (copy.parent / "agents").exists()
    before = agent_spec(entry, "prompt")
    (copy / "prompts" / "card_agent.user.md").write_text("{note}\n(a changed user message)\n")
    after = agent_spec(entry, "prompt")
    assert after.texts != before.texts and after.code == before.code


def test_an_edit_to_a_graders_helper_runs_a_new_baseline(cli, repo, tmp_path, monkeypatch):
    copy = code_copy(tmp_path, monkeypatch, "prompt_optimizer_graders")
    monkeypatch.setattr(sys.modules["prompt_optimizer_graders.card"], "__file__", str(copy / "card.py"))
    assert not baseline_run(cli)
    source = (copy / "card.py").read_text()
    helper = "def _state(trial: Trial) -> CardOutcome:\n    return trial.outcome.read(CardOutcome)\n"
    assert helper in source, "the card graders' helper moved: point this test at another one"
    (copy / "card.py").write_text(source.replace(helper, helper.replace("(CardOutcome)\n", "(CardOutcome).model_copy()\n")))
    assert not baseline_run(cli)
    assert re.fullmatch(r"graders\.\*\.module \((\d+)\), graders\.\*\.package \(\1\)",
                        baselines(cli, tmp_path)[-1]["spec_changes"])


def test_an_edit_to_a_judges_rubric_runs_a_new_baseline(cli, repo, tmp_path, monkeypatch):
    shutil.copytree(PROJECT_ROOT / "suites/pkm_agent", repo / "suites/pkm_agent")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the pkm suite")
    judge = judging.get_judge("pkm_insight_quality")
    rubric = tmp_path / "rubric.md"
    rubric.write_text(judge.rubric.read_text())
    monkeypatch.setitem(judging._registry, judge.name, dataclasses.replace(judge, rubric=rubric))
    args = ("--suite", "pkm_agent", "--trials", "1")
    assert not baseline_run(cli, *args)
    rubric.write_text(rubric.read_text() + "\nA score of 5 needs a cited source.\n")
    assert not baseline_run(cli, *args)
    assert baselines(cli, tmp_path)[-1]["spec_changes"] == "graders.pkm_insight_quality.rubric"


def test_a_new_litellm_version_runs_a_new_baseline(cli, repo, tmp_path, monkeypatch):
    assert not baseline_run(cli)
    installed = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "99.0.0" if name == "litellm" else installed(name))
    assert not baseline_run(cli)
    last = baselines(cli, tmp_path)[-1]
    assert last["spec_changes"] == "packages.litellm" and "litellm=99.0.0" in last["spec"]


def test_the_spec_names_the_commit_and_whether_the_tree_is_dirty(cli, repo, tmp_path):
    assert not baseline_run(cli)
    (repo / "notes.txt").write_text("committed\nplus an uncommitted edit\n")
    assert not baseline_run(cli)
    commit = git(repo, "rev-parse", "HEAD").strip()
    first, second = baselines(cli, tmp_path)
    assert first["spec"].startswith(f"{commit[:10]} ") and second["spec"].startswith(f"{commit[:10]}+dirty ")
    assert second["spec_changes"] == "git.changes, git.dirty"


def test_changed_parts_name_each_differing_leaf_and_parts_on_one_side_only():
    before = {"agents": {"a": {"code": "1", "texts": "2"}}, "packages": {"litellm": "1.0"}}
    after = {"agents": {"a": {"code": "9", "texts": "2"}}, "packages": {"litellm": "1.0", "dspy": "3.0"}}
    assert changed_parts(before, after) == ["agents.a.code", "packages.dspy"]
    assert changed_parts(after, after) == []


def test_a_field_changed_in_many_entries_of_one_kind_is_shown_once_with_how_many():
    """A new `--trials` changes every task's `trials`: `optimizer history` shows one line, not 25."""
    from optimizer.reporting.history import summarized

    parts = [f"tasks.card_agent/card_{name}.trials" for name in ("a", "b", "c")]
    parts += ["agents.card_agent.code", "packages.dspy", "tasks.card_agent/card_a.fixture"]
    assert summarized(parts) == ["tasks.*.trials (3)", "agents.card_agent.code", "packages.dspy",
                                 "tasks.card_agent/card_a.fixture"]


def test_a_recorded_spec_reads_back_whole():
    spec = {"git": None, "packages": {"litellm": "1.0"}, "optimizer_source": "s",
            "models": {"agent": "mock/sim", "judge": "mock/sim", "temperature": None, "seed": 0},
            "agents": {}, "tasks": {}, "graders": {}}
    assert RunSpec.model_validate(spec).model_dump(exclude_unset=True) == spec
    with pytest.raises(ValueError):
        RunSpec.model_validate({**spec, "unknown": 1})


def test_history_reads_a_recorded_spec_by_its_parts_without_the_models():
    """`optimizer history` shows a spec's line from the stored JSON (`optimizer.reporting.recorded_spec`):
    the parts it checks are the model's, and a stored dict of another shape shows nothing."""
    assert SPEC_PARTS == set(RunSpec.model_fields)
    spec = {"git": {"commit": "0123456789abcdef", "dirty": True, "changes": "c"},
            "packages": {"litellm": "1.0", "dspy": "3.0"}, "optimizer_source": "s",
            "models": {"agent": "mock/sim", "judge": "mock/sim", "temperature": None, "seed": 0},
            "agents": {}, "tasks": {}, "graders": {}}
    RunSpec.model_validate(spec)
    assert short_spec(spec) == "0123456789+dirty dspy=3.0 litellm=1.0"
    assert short_spec({**spec, "git": None}) == "no git dspy=3.0 litellm=1.0"
    assert short_spec({**spec, "skipped_graders": ["judge"]}) == short_spec(spec)  # a later part, absent before it
    for other in ({**spec, "unknown": 1}, {key: spec[key] for key in list(spec)[1:]}, {**spec, "git": {"commit": 3}},
                  {**spec, "packages": {"litellm": 1}}, [], None, {}):
        assert short_spec(other) is None
