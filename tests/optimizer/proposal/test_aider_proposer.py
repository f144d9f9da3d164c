"""aider (the `aider-chat` CLI, in its own venv: `make aider`) as the `command` proposer, end to
end: in the box, with no network, against an OpenAI-compatible server; its auto-committed edit
becomes the proposal's patch and meets the gate; the user's checkout is left as it was.

The fast test scripts the server (tests/openai_stub_server.py answers with a SEARCH/REPLACE
edit of the prompt file); the slow one (marker `local`) points aider at the embedded model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.helpers import git, project_repo

AIDER = Path(os.environ.get("OPTIMIZER_AIDER_VENV", Path.home() / ".cache/prompt-optimizer/aider-venv")) / "bin/aider"
PROMPT = "agents/prompts/card_agent.md"
DATA_LINE = "- data: fill the template's fields from the note itself; do not invent details."
RULE = "- Keep times, URLs, amounts and names exactly as written in the note."
EDIT = f"{PROMPT}\n```\n<<<<<<< SEARCH\n{DATA_LINE}\n=======\n{DATA_LINE}\n{RULE}\n>>>>>>> REPLACE\n```\n"
NO_NETWORK = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
              "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
"""Every connection but to this machine goes to a closed port: a run that needed the network fails."""

needs_aider = pytest.mark.skipif(not AIDER.exists(), reason=f"aider is not installed at {AIDER}: run `make aider` "
                                                            "(about 4 minutes; not part of `make test`)")


def aider_command(model: str) -> str:
    """The proposer command of docs/proposers.md#aider."""
    return (f"{AIDER} --model {model} --model-settings-file {PROJECT_ROOT / 'examples/aider/model-settings.yml'} "
            "--yes-always --no-check-update --analytics-disable --no-show-release-notes --no-pretty --no-stream "
            "--no-gitignore --map-tokens 0 --no-show-model-warnings --input-history-file \"$HOME/input.history\" "
            "--chat-history-file \"$HOME/chat.history.md\" --message-file {request} " + PROMPT)


def snapshot(root: Path) -> dict:
    """The user's checkout: what the loop may add is a proposal branch, nothing here."""
    return {"status": git(root, "status", "--porcelain"), "head": git(root, "rev-parse", "HEAD"),
            "main": git(root, "rev-parse", "main"), "prompt": (root / PROMPT).read_text()}


@pytest.fixture
def stub(tmp_path):
    reply = tmp_path / "reply.txt"
    reply.write_text(EDIT)
    server = subprocess.Popen([sys.executable, str(PROJECT_ROOT / "tests/openai_stub_server.py"), "--port", "0",
                               "--log", str(tmp_path / "calls.txt"), "--reply-file", str(reply)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        yield f"http://127.0.0.1:{port}/v1", tmp_path / "calls.txt"
    finally:
        server.kill()
        server.wait()


def run_with_aider(cli, tmp_path, monkeypatch, base_url: str, model: str) -> tuple[dict, dict, str]:
    root = project_repo(tmp_path / "repo")
    before = snapshot(root)
    for name, value in {**NO_NETWORK, "OPTIMIZER_ROOT": str(root), "OPTIMIZER_PROPOSER": "command",
                        "OPTIMIZER_PROPOSER_COMMAND": aider_command(model), "OPENAI_API_BASE": base_url,
                        "OPENAI_API_KEY": "none", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
        monkeypatch.setenv(name, value)
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code in (0, 1), out + err[-3000:]
    summary = json.loads((tmp_path / "run.json").read_text())
    assert snapshot(root) == before, "the user's checkout changed"
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    recorded = open_store(load_settings(root), root).proposals.rows(branch=summary["proposals"][0]["branch"])[-1]
    return summary, recorded, err


@needs_aider
def test_aider_edits_the_prompt_in_the_box_and_its_commit_is_the_patch_the_gate_judges(cli, tmp_path, monkeypatch,
                                                                                        stub):
    base_url, calls = stub
    monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "mock/sim")
    summary, proposal, err = run_with_aider(cli, tmp_path, monkeypatch, base_url, "openai/local")
    assert proposal["status"] not in ("no_patch", "rejected_check"), (proposal, err[-3000:])
    assert f"+{RULE}" in proposal["diff"] and proposal["diff"].count("\n+- ") == 1, proposal["diff"]
    assert proposal.get("decision"), "the patch met the gate"
    assert calls.read_text().strip(), "aider asked the stub, not another server"


@pytest.mark.local_model
@needs_aider
def test_aider_on_the_embedded_model_gives_a_patch_or_a_clear_no_patch(cli, isolated, tmp_path, monkeypatch):
    """The 1.5B model as aider's model (the agent on mock/sim): whatever it writes, the iteration ends in a patch the
    gate judged or no patch with its reason (e.g. "empty: the patch changes nothing" when the model's
    edits did not follow aider's format), and the user's checkout is untouched."""
    from optimizer.engines import llamacpp as local
    from optimizer.engines.llamacpp import install, server

    assert install.status().ready, "the local model is not installed: make model"
    monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "mock/sim")  # the embedded model serves aider alone
    base_url = server.endpoint(local.spec()).rstrip("/") + "/v1"
    summary, proposal, err = run_with_aider(cli, tmp_path, monkeypatch, base_url, "openai/local")
    print(json.dumps({"status": proposal["status"], "reason": proposal.get("reason"), "diff": proposal["diff"]},
                     indent=2))
    if not proposal["diff"].strip():  # no edit aider could apply: said so, not a silent success
        assert proposal["status"] in ("no_patch", "rejected_check") and proposal["reason"].strip(), proposal
    else:
        assert proposal["diff"].strip() and (proposal.get("decision") or proposal["status"] == "rejected_check"), proposal
