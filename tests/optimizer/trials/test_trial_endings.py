"""How a trial ends decides what it counts for. An agent that uses all its turns, or runs past its
deadline while the model keeps answering at its normal rate, *failed* (score 0, counted in every
mean); a setup fault (a model that cannot answer) or a deadline the infrastructure used up (no call
completed, or the model far slower than it normally is) leaves a trial *errored* and out of the
scores and of every comparison."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from optimizer.settings.loading import load_settings
from optimizer.errors import DeadlinePassed, TrialTimeout
from optimizer.trials.evaluate import execute, prepare
from optimizer.gate import PairTable, decide
from optimizer.models import ModelClient, register_provider
from optimizer.models.client import forget_rates
from optimizer.scoring import spoiled
from optimizer.store import open_store
from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT
from tests.helpers import after_data_line, event_task, script, tool_call_reply, write_suite

FACT_ID = "2026/05/25.md#ts_1"
UNFINISHED_SAVE = {"name": "save_timeline_card", "arguments": {"fact_id": FACT_ID}}
"""A save the tool refuses (no title, no template): the card agent is told so and goes on."""
LOOP_RULE = "- Before answering, always save the card once more to double-check it."


def _looping_model():
    """`looper/sim` plays mock/sim, except that a system prompt holding `LOOP_RULE` makes it repeat
    a save the tool refuses, turn after turn: a patch that sends the agent into a loop."""
    import litellm
    from litellm import CustomLLM

    class Looper(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            if LOOP_RULE not in messages[0]["content"]:
                metadata = (kwargs.get("litellm_params") or {}).get("metadata")
                return litellm.completion(model="mock/sim", messages=messages, metadata=metadata, num_retries=0)
            return tool_call_reply(model, "again", UNFINISHED_SAVE["name"], json.dumps(UNFINISHED_SAVE["arguments"]))

    return Looper()


register_provider("looper", _looping_model, ["looper/sim"])


def looping_task(task_id: str, **overrides) -> dict:
    """A card task whose reference solution (what mock/oracle plays) never gets the card saved:
    each save is refused, and each differs from the last, so none is a repeat."""
    saves = [{"name": "save_timeline_card", "arguments": {"fact_id": FACT_ID, "title": f"draft {n}"}}
             for n in range(30)]
    return event_task(task_id, reference_solution={"tool_calls": saves}, **overrides)


def repeating_task(task_id: str) -> dict:
    """A card task whose reference solution makes the same refused save again and again."""
    return event_task(task_id, reference_solution={"tool_calls": [UNFINISHED_SAVE] * 30})


def run_suite(tmp_path, tasks: list[dict], agent_model: str):
    suite = write_suite(tmp_path / "suite", tasks)
    settings = load_settings(PROJECT_ROOT, {"agent_model": agent_model, "concurrency": 2, "cache": False})
    store = open_store(settings, PROJECT_ROOT)
    run, summary = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), store)
    return {trial.task_id: trial for trial in run.trials}, summary, store, run.run_id


def test_a_trial_at_the_turn_limit_fails_with_score_zero_and_counts_against_the_bucket(tmp_path):
    trials, summary, store, run_id = run_suite(tmp_path, [event_task("finishes"), looping_task("loops")],
                                               "mock/oracle")
    looped = trials["loops"]
    assert (looped.status, looped.score) == ("failed", 0.0)
    assert looped.error == "ended: the agent used all 8 turns without finishing"
    assert looped.grader_results == [], "an unfinished trial is not graded"
    assert [call.name for call in looped.transcript.tool_calls] == ["save_timeline_card"] * 8
    assert all(call.is_error for call in looped.transcript.tool_calls)
    assert looped.transcript.usage.calls == 8
    assert trials["finishes"].status == "passed"

    assert summary["totals"]["errored"] == 0
    bucket = summary["buckets"][0]
    assert bucket["mean_score"] == 0.5, "the looping trial must pull the mean down, not drop out of it"
    assert bucket["pass_at_k"] == 0.5
    assert summary["unfinished"] == [{"suite": "tmp_suite", "task_id": "loops", "trial": 0,
                                      "error": "ended: the agent used all 8 turns without finishing"}]
    stored = store.trials.load(run_id)
    assert {(t.task_id, t.status, t.score, t.error) for t in stored} == {
        ("finishes", "passed", 1.0, None), ("loops", "failed", 0.0, looped.error)}


def test_an_agent_repeating_one_call_is_told_so_and_fails_after_three_repeats(tmp_path):
    trials, summary, _, _ = run_suite(tmp_path, [repeating_task("repeats")], "mock/oracle")
    trial = trials["repeats"]
    assert (trial.status, trial.score) == ("failed", 0.0)
    assert trial.error == ("ended: the agent kept repeating calls it had already made (3 times in a row) "
                           "without finishing")
    calls = trial.transcript.tool_calls
    assert len(calls) == 4 and calls[0].is_error, "the first call is run and refused"
    for call in calls[1:]:  # the repeats are not run again: the answer says so and what is missing
        assert call.result.startswith("You already made this exact call at turn 1")
        assert "The card is not finished yet:" in call.result
    assert summary["totals"]["errored"] == 0


def test_the_patch_request_shows_how_an_unfinished_trial_ended(tmp_path):
    from optimizer.proposal.request import failure_records, load_manual, render_request, select_targets
    from optimizer.suites import load_suites

    trials, _, _, _ = run_suite(tmp_path, [event_task("finishes"), looping_task("loops")], "mock/oracle")
    suites = load_suites([str(tmp_path / "suite")], PROJECT_ROOT)
    selection = select_targets(list(trials.values()), suites)
    failures = failure_records(list(trials.values()), suites, selection)
    assert [(f["task_id"], f["score"], f["ending"]) for f in failures] == [
        ("loops", 0.0, "ended: the agent used all 8 turns without finishing")]
    text, _ = render_request(selection=selection, failures=failures, prompt="prompt", prompt_file="p.md",
                             manual=load_manual(PROJECT_ROOT, "card_agent"), iteration_id="it", base_commit="0" * 40,
                             agent_model="mock/oracle", max_changed_lines=3, token_budget=10_000)
    assert "Trial 0, score 0.00, not graded: ended: the agent used all 8 turns without finishing." in text


def test_a_trial_whose_deadline_passes_while_the_model_keeps_answering_fails_with_score_zero(tmp_path):
    """Each answer takes 0.3 s; the deadline passes between two of them, long before the turn limit."""
    trials, summary, _, _ = run_suite(tmp_path, [looping_task("loops", timeout_seconds=1)], "mock/oracle@300ms")
    looped = trials["loops"]
    assert (looped.status, looped.score) == ("failed", 0.0)
    assert looped.error == "ended: ran past timeout_seconds=1 while the model kept answering"
    assert 1 <= len(looped.transcript.tool_calls) < 8
    assert looped.transcript.usage.calls == len(looped.transcript.tool_calls)
    assert summary["totals"]["errored"] == 0 and summary["buckets"][0]["mean_score"] == 0.0


def test_a_deadline_found_passed_on_a_first_attempt_is_the_agents_and_on_a_retry_the_providers():
    """At a first attempt every earlier call was answered, so the agent used the time up; at a
    retry the model was failing to answer."""
    client = ModelClient("mock/oracle", deadline=time.monotonic() - 1)
    with pytest.raises(DeadlinePassed):
        client.remaining()
    with pytest.raises(TrialTimeout) as raised:
        client.remaining(retrying=True)
    assert not isinstance(raised.value, DeadlinePassed)
    assert ModelClient("mock/oracle", deadline=time.monotonic() + 60).remaining() > 0


def test_a_patch_that_sends_the_agent_into_a_loop_is_rejected_on_its_zeros(cli, repo, tmp_path, monkeypatch):
    """Were the looping trials errored, they would drop out of the gate's pairs and the bucket
    would show no after score at all."""
    monkeypatch.setenv("OPTIMIZER_AGENT_MODEL", "looper/sim")
    script(tmp_path, monkeypatch, after_data_line(LOOP_RULE))
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] == "rejected_gate", proposal
    decision = json.loads((Path(summary["request"]).parent / "decision-1.json").read_text())
    assert decision["accepted"] is False
    targeted = next(row for row in decision["buckets"] if row["targeted"])
    assert targeted["pairs"] > 0 and targeted["before"] > 0
    assert targeted["after"] == 0.0, "every looping trial counts as a zero"

    store = open_store(load_settings(repo, {}), repo)
    candidate_run = next(row["candidate_run_id"] for row in store.proposals.rows(branch=proposal["branch"]))
    looped = store.trials.load(candidate_run)
    assert looped and {(t.status, t.score, t.error) for t in looped} == {
        ("failed", 0.0, "ended: the agent kept repeating calls it had already made (3 times in a row) "
                        "without finishing")}


def _generating_model():
    """`generating/slow` stands for the embedded model stopped mid-answer by the trial's deadline:
    it answers after the deadline with the time-out the embedded provider raises then."""
    from litellm import CustomLLM
    from litellm.exceptions import Timeout

    from optimizer.models import GENERATING_AT_DEADLINE

    class Generating(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            time.sleep(1.2)
            raise Timeout(message=GENERATING_AT_DEADLINE, model=model, llm_provider="generating")

    return Generating()


register_provider("generating", _generating_model, ["generating/slow"])


def test_a_trial_whose_model_completes_no_call_before_the_deadline_is_errored_as_the_infrastructures(tmp_path):
    """The model was still generating its first reply at the deadline: the agent never had a turn."""
    trials, summary, store, run_id = run_suite(tmp_path, [event_task("slow", timeout_seconds=1)], "generating/slow")
    trial = trials["slow"]
    assert (trial.status, trial.score) == ("errored", None)
    assert trial.error.startswith("infrastructure: no call to generating/slow completed in 1 s of waiting for it; "
                                  "ran past timeout_seconds"), trial.error
    assert spoiled(trial)
    assert summary["totals"]["errored"] == 1 and summary["unfinished"] == []
    assert store.trials.load(run_id)[0].error == trial.error


def test_a_deadline_the_agents_own_work_used_up_is_never_blamed_on_the_model():
    """No model call completed, but the agent's tools, not the model, took the time."""
    client = ModelClient("m")
    assert client.spoiled(120.0) is None
    client.model_s = 119.0
    assert client.spoiled(120.0) == "no call to m completed in 119 s of waiting for it"


THROTTLE = {"delay": 0.0}
"""Seconds `throttled/oracle` waits before each answer."""


def _throttled_model():
    """`throttled/oracle` plays mock/oracle, each answer after `THROTTLE["delay"]` seconds: a
    server whose speed the test sets."""
    import litellm
    from litellm import CustomLLM

    class Throttled(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            time.sleep(THROTTLE["delay"])
            metadata = (kwargs.get("litellm_params") or {}).get("metadata")
            return litellm.completion(model="mock/oracle", messages=messages, metadata=metadata, num_retries=0)

    return Throttled()


register_provider("throttled", _throttled_model, ["throttled/oracle"])


@pytest.fixture
def throttled(monkeypatch):
    """The throttled model with no normal rate known yet; returns a setter of its delay."""
    forget_rates()
    monkeypatch.setitem(THROTTLE, "delay", 0.0)
    yield lambda seconds: THROTTLE.__setitem__("delay", seconds)
    forget_rates()


def test_a_trial_cut_while_the_model_runs_far_below_its_normal_rate_is_errored_not_failed(tmp_path, throttled):
    throttled(0.02)
    run_suite(tmp_path / "quiet", [looping_task("warm")], "throttled/oracle")  # 8 calls at the normal rate
    throttled(0.7)  # the machine got busy: each answer takes 35 times as long
    trials, summary, _, _ = run_suite(tmp_path / "busy", [looping_task("loops", timeout_seconds=1)],
                                      "throttled/oracle")
    trial = trials["loops"]
    assert (trial.status, trial.score) == ("errored", None), trial.error
    assert trial.error.startswith("infrastructure: throttled/oracle delivered "), trial.error
    assert "under 25% of its normal" in trial.error and trial.transcript.usage.calls >= 1
    assert summary["totals"]["errored"] == 1


def test_an_agent_looping_fast_turns_until_the_deadline_stays_failed(tmp_path, throttled):
    """The agent's own loop, at the model's normal rate, used up the time: it pays for its loops.
    (Two seconds of 0.3 s calls: in one second of 0.15 s calls, a second-long stall of the busy
    test machine on one call made the trial's rate look a seventh of normal.)"""
    throttled(0.3)
    run_suite(tmp_path / "warm", [looping_task("warm")], "throttled/oracle")
    trials, summary, _, _ = run_suite(tmp_path / "loop", [looping_task("loops", timeout_seconds=2)],
                                      "throttled/oracle")
    trial = trials["loops"]
    assert (trial.status, trial.score) == ("failed", 0.0), trial.error
    assert trial.error == "ended: ran past timeout_seconds=2 while the model kept answering"
    assert 3 <= trial.transcript.usage.calls < 8
    assert summary["totals"]["errored"] == 0


def _pair(index: int, after: Trial) -> tuple[Trial, Trial]:
    before = Trial(suite="s", task_id="a1", bucket="a", split="train", index=index, status="failed", score=0.0)
    return before, after.model_copy(update={"index": index})


def _spoiled(index: int) -> Trial:
    return Trial(suite="s", task_id="a1", bucket="a", split="train", index=index, status="errored",
                 error="infrastructure: no call to m completed in 120 s of waiting for it; ran past timeout_seconds")


def test_spoiled_pairs_are_left_out_of_the_values_and_spoiled_endings_on_both_sides_hold_against_neither():
    """A busy machine spoils trials of both prompts alike: their pairs are left out of the values,
    and the errored rule sees no side favoured."""
    table = PairTable()
    improved = Trial(suite="s", task_id="a1", bucket="a", split="train", index=0, status="passed", score=1.0)
    for index in range(10):
        table.add(*_pair(index, improved))
    for index in range(10, 20):
        before, after = _pair(index, improved)
        table.add(*((_spoiled(index), after) if index % 2 else (before, _spoiled(index))))
    decision = decide(table, targets={("s", "a")})
    assert decision.excluded_pairs == 10
    rule = next(rule for rule in decision.rules if rule.rule == "errored")
    assert rule.passed and (rule.numbers["candidate_spoiled"], rule.numbers["base_spoiled"]) == (5, 5), rule.reason
    targeted = next(row for row in decision.buckets if row.targeted)
    assert (targeted.pairs, targeted.after) == (10, 1.0), "only the pairs with both sides scored count"
    assert decision.accepted, decision.reasons


def test_a_candidate_whose_trials_alone_end_spoiled_is_rejected_and_its_unscored_group_is_never_safe():
    """Ten candidate-only endings past the deadline: the patch made the model slow (or the
    machine was busier while it ran); either way the pairs left would hide a harm."""
    table = PairTable()
    improved = Trial(suite="s", task_id="a1", bucket="a", split="train", index=0, status="passed", score=1.0)
    for index in range(10):
        table.add(*_pair(index, improved))
    for index in range(10):
        before = Trial(suite="s", task_id="b1", bucket="b", split="train", index=index, status="passed", score=1.0)
        table.add(before, _spoiled(index).model_copy(update={"task_id": "b1", "bucket": "b"}))
    decision = decide(table, targets={("s", "a")})
    rule = next(rule for rule in decision.rules if rule.rule == "errored")
    assert not rule.passed and rule.numbers["candidate_spoiled"] == 10 and rule.numbers["p"] < 0.01, rule.reason
    assert "ended without a score on 10 pair(s) (0 errored, 10 past the deadline" in rule.reason
    other = next(row for row in decision.buckets if row.bucket == "b")
    assert (other.pairs, other.verdict) == (0, "not shown safe")
    assert "b (no pair with both sides scored)" in next(r for r in decision.rules if r.rule == "no_harm").reason
    assert not decision.accepted