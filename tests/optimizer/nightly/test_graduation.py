"""`optimizer graduate`: buckets green in each of the last runs move into a regression suite that
then gates every later iteration."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import FACT_RULE, after_data_line, git, script


def test_a_green_bucket_graduates_in_a_commit_of_its_own_and_then_gates(cli, repo, tmp_path, monkeypatch):
    code, out, err = cli("graduate")
    assert code == 0 and "no bucket passed 95%" in out
    for _ in range(5):
        code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/oracle")
        assert code == 0, out + err
    code, out, err = cli("graduate")
    assert code == 0, out + err
    assert "card_agent/template_link: 2 task(s), pass rate per run (newest first) 100%, 100%, 100%, 100%, 100%" in out
    assert "--apply" in out
    assert not (repo / "suites" / "card_agent_regression").exists()

    status_before = git(repo, "status", "--porcelain")
    head_before = git(repo, "rev-parse", "HEAD").strip()
    code, out, err = cli("graduate", "--bucket", "template_link", "--apply")
    assert code == 0, out + err
    files = git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert files and all(path.startswith("suites/card_agent_regression/") for path in files)
    assert "suites/card_agent_regression/suite.json" in files and len(files) == 3
    assert git(repo, "rev-parse", "HEAD~1").strip() == head_before
    assert "Graduate card_agent/template_link" in git(repo, "log", "-1", "--format=%B")
    assert git(repo, "status", "--porcelain") == status_before  # the user's own changes stay as they were
    spec = json.loads((repo / "suites/card_agent_regression/suite.json").read_text())
    assert spec["kind"] == "regression" and spec["agent_name"] == "card_agent"

    code, out, err = cli("suites", "validate", "--suite", "card_agent_regression")
    assert code == 0 and "card_agent_regression: 2 tasks, ok" in out
    code, out, err = cli("graduate")
    assert "template_link" not in out  # graduated buckets are not proposed again

    script(tmp_path, monkeypatch, after_data_line(FACT_RULE))
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert summary["status"] == "accepted"
    decision = json.loads((Path(summary["request"]).parent / "decision-1.json").read_text())
    harm = next(rule for rule in decision["rules"] if rule["rule"] == "no_harm")
    regression = next(b for b in decision["buckets"] if b["kind"] == "regression")
    assert harm["passed"] and regression["suite"] == "card_agent_regression" and regression["pairs"] >= 8
