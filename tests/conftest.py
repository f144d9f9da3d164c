"""Every test runs isolated: its own state dir (store, cache), no API keys, fast retries."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("OPTIMIZER_STATE_DIR", str(state))
    monkeypatch.setenv("OPTIMIZER_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(PROJECT_ROOT))
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPTIMIZER_TRIALS", "OPTIMIZER_SUITES"):
        monkeypatch.delenv(key, raising=False)
    for role in ("AGENT", "JUDGE", "PATCHER"):  # the default, the embedded model, is for `make test-local`
        monkeypatch.setenv(f"OPTIMIZER_{role}_MODEL", "mock/sim")
    return state


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the `optimizer` command in-process; returns (exit code, stdout, stderr)."""

    def invoke(*args: str) -> tuple[int, str, str]:
        from optimizer.cli import main

        monkeypatch.setattr(sys, "argv", ["optimizer", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
