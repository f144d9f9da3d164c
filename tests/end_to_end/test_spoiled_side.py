"""A patch under which the model answers the other notes only after their deadline is not
accepted: the trials it spoils fall on the candidate's side, and the gate counts them.

End to end: `optimizer run` on a throw-away repository, the agent served by an OpenAI-compatible
server of ours (`tests/openai_stub_server.py --marker`) whose answers depend on the prompt. With
the patch's line in the system message, the targeted bucket's notes get their reference calls
(the target rises from 0 to 1) and every other note waits past its task's deadline: each of
those candidate trials ends `infrastructure: ...` (the model completed no call in time), which
used to leave its pair out of every test and the patch accepted with four buckets "no harm
found" on 0 pairs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from optimizer.settings.loading import load_settings
from optimizer.models import routing
from optimizer.store import open_store
from tests.conftest import PROJECT_ROOT
from tests.helpers import FACT_RULE, git, optimizer_branches
from tests.optimizer.proposal.test_proposer_isolation import APPEND_RULE, propose_with

STUB = PROJECT_ROOT / "tests" / "openai_stub_server.py"
TARGET = "template_quote"
DEADLINE_S = 2


@pytest.fixture
def prompt_dependent_server(repo, tmp_path, monkeypatch):
    """The stub server for `repo`'s card suite (deadlines cut to `DEADLINE_S`), routed as
    `slowstub` through a models file; stopped after the test."""
    for path in (repo / "suites" / "card_agent" / "tasks").rglob("*.json"):
        task = json.loads(path.read_text())
        if "timeout_seconds" in task:
            task["timeout_seconds"] = DEADLINE_S
            path.write_text(json.dumps(task, indent=2))
    git(repo, "add", "suites")
    git(repo, "commit", "-qm", "short deadlines")
    log = tmp_path / "calls.txt"
    log.touch()
    server = subprocess.Popen([sys.executable, str(STUB), "--name", "slow", "--log", str(log), "--root", str(repo),
                               "--marker", "the user searches for them later", "--bucket", TARGET,
                               "--slow", str(DEADLINE_S + 1.5)], stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT)
    try:
        line = server.stdout.readline()
        assert line.startswith("PORT "), f"stub did not start: {line!r}"
        models = tmp_path / "models.yaml"
        models.write_text(yaml.safe_dump({"model_list": [{"model_name": "slowstub", "litellm_params": {
            "model": "openai/stub", "api_base": f"http://127.0.0.1:{line.split()[1]}/v1", "api_key": "none"}}],
            "router_settings": {"num_retries": 0}}))  # a Router retry after the deadline runs the trial past its grace
        monkeypatch.setenv("OPTIMIZER_MODELS_FILE", str(models))
        monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "slowstub")
        monkeypatch.setenv("OPTIMIZER_CACHE", "false")
        yield server
    finally:
        server.kill()
        server.wait(timeout=10)
        server.stdout.close()
        routing.use_models_file(Path("/nonexistent/models.yaml"), required=False)


def test_a_patch_that_makes_the_model_miss_the_other_notes_deadlines_is_rejected(cli, repo, tmp_path, monkeypatch,
                                                                                  prompt_dependent_server):
    assert "the user searches for them later" in FACT_RULE
    propose_with(monkeypatch, APPEND_RULE)
    code, out, err = cli("run", "--trials", "1", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert f"targets: card_agent/{TARGET} (2 failing task(s)" in err, err
    assert proposal["status"] == "rejected_gate", proposal
    decision = json.loads((Path(summary["request"]).parent / "decision-1.json").read_text())
    target = next(row for row in decision["buckets"] if row["targeted"])
    assert (target["before"], target["after"]) == (0.0, 1.0), "the patch does lift its target"
    errored = next(rule for rule in decision["rules"] if rule["rule"] == "errored")
    assert not errored["passed"], errored
    assert errored["numbers"]["candidate_spoiled"] >= 15 and errored["numbers"]["base_only"] == 0, errored
    assert "past the deadline" in errored["reason"]
    others = [row for row in decision["buckets"] if not row["targeted"] and row["kind"] == "bucket"]
    assert others and all(row["verdict"] != "no harm found" for row in others if row["pairs"] == 0), others
    assert decision["accepted"] is False
    store = open_store(load_settings(repo, {}), repo)
    run_id = store.proposals.rows(branch=proposal["branch"])[0]["candidate_run_id"]
    endings = [t.error for t in store.trials.load(run_id) if t.bucket != TARGET and t.suite == "card_agent"]
    assert endings and all(error.startswith("infrastructure: ") for error in endings), endings[:3]
    assert optimizer_branches(repo) == [], "a rejected proposal leaves no branch"
