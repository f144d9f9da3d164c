"""The store's recorded trials are checked around every proposer: a proposer without bubblewrap
that rewrites them stops the iteration (exit 3) before anything is accepted.

End to end with the unconfined `command` proposer on a throw-away repository (see
tests/end_to_end/test_loop.py and tests/optimizer/proposal/test_proposer_isolation.py)."""

from __future__ import annotations

import json
import shlex
import sqlite3
import sys

import pytest

from tests.helpers import optimizer_branches
from tests.optimizer.proposal.test_proposer_isolation import APPEND_RULE, propose_with

REWRITE_BASELINE = ("update trials set status = 'failed', score = 0 "
                    "where run_id in (select run_id from runs where kind = 'baseline')")
FORGE_TRIAL = ("insert into trials (run_id, suite, task_id, bucket, split, trial_index, status, score, error, "
               "duration_s, prompt_tokens, completion_tokens, cost_usd, model_calls, cache_hits, transcript_json, "
               "outcome_json) select run_id, suite, task_id, bucket, split, 999, 'failed', 0, null, 1, 0, 0, 0, 1, 0, "
               "transcript_json, outcome_json from trials where run_id in (select run_id from runs where kind = "
               "'baseline') limit 1")
READ_ONLY = "select count(*) from trials"


def sql_command(database, statement: str) -> str:
    """Shell text that runs `statement` on the SQLite store, as any process of the user's could."""
    code = f"import sqlite3; c = sqlite3.connect({str(database)!r}); c.execute({statement!r}); c.commit()"
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


@pytest.fixture
def unconfined(monkeypatch):
    monkeypatch.setattr("optimizer.proposal.box.find_bwrap", lambda: None)


@pytest.mark.parametrize("statement", [REWRITE_BASELINE, FORGE_TRIAL], ids=["rewrites-baseline", "forges-a-trial"])
def test_a_proposer_that_rewrites_recorded_trials_stops_the_iteration(cli, repo, tmp_path, monkeypatch, isolated,
                                                                      unconfined, statement):
    database = isolated / "optimizer.db"
    propose_with(monkeypatch, f"{APPEND_RULE} && {sql_command(database, statement)}")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 3, out + err
    assert "the store changed while the proposer ran" in err and str(database) in err
    assert "confine the proposer with bubblewrap" in err
    assert optimizer_branches(repo) == []
    with sqlite3.connect(database) as conn:
        status, summary = conn.execute("select status, summary_json from iterations").fetchone()
        assert conn.execute("select count(*) from proposals where status = 'accepted'").fetchone() == (0,)
    assert status == "stopped" and "the store changed" in json.loads(summary)["stop_reason"]


def test_a_proposer_that_only_reads_the_store_is_gated_as_usual(cli, repo, tmp_path, monkeypatch, isolated,
                                                               unconfined):
    propose_with(monkeypatch, f"{APPEND_RULE} && {sql_command(isolated / 'optimizer.db', READ_ONLY)}")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "accepted"


def test_recorded_trials_changed_during_the_gate_stop_it_before_it_decides(cli, repo, tmp_path, monkeypatch,
                                                                          isolated, unconfined):
    from optimizer.loop import candidate as loop

    compare = loop.compare

    def compare_then_tamper(*args, **kwargs):
        comparison = compare(*args, **kwargs)
        with sqlite3.connect(isolated / "optimizer.db") as conn:  # a process left behind, writing late
            conn.execute(REWRITE_BASELINE)
        return comparison

    monkeypatch.setattr(loop, "compare", compare_then_tamper)
    propose_with(monkeypatch, APPEND_RULE)
    code, out, err = cli("run")
    assert code == 3, out + err
    assert "the store changed before the gate decided" in err
    assert optimizer_branches(repo) == []


def test_a_search_proposer_that_rewrites_recorded_trials_stops_the_search(cli, repo, tmp_path, monkeypatch,
                                                                          isolated, unconfined):
    propose_with(monkeypatch, f"{APPEND_RULE} && {sql_command(isolated / 'optimizer.db', REWRITE_BASELINE)}")
    code, out, err = cli("run", "--search-rollouts", "24")
    assert code == 3, out + err
    assert "the store changed while the proposer ran" in err
    assert optimizer_branches(repo) == []
