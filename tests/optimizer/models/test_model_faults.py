"""Model faults are retried with backoff; a trial that still fails is errored and the run goes on.
A slow model that still answers is no fault: the trial that runs out of time is failed."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from optimizer.settings.loading import load_settings
from optimizer.trials.evaluate import execute, prepare
from optimizer.store import open_store
from optimizer.models import register_provider
from tests.conftest import PROJECT_ROOT
from tests.helpers import event_task, tool_call_reply, write_suite

SCRIPTS: dict[str, list[str]] = {}
CALLS: dict[str, list[float]] = {}
_lock = threading.Lock()


def _fault(kind: str, model: str):
    import litellm

    request = httpx.Request("POST", "http://fake.invalid/v1/chat/completions")
    if kind == "timeout":
        return litellm.Timeout("request timed out", model=model, llm_provider="fake")
    if kind == "429":
        response = httpx.Response(429, headers={"retry-after": "0.2"}, request=request)
        return litellm.RateLimitError("slow down", llm_provider="fake", model=model, response=response)
    if kind == "500":
        response = httpx.Response(500, request=request)
        return litellm.InternalServerError("boom", llm_provider="fake", model=model, response=response)
    if kind == "401":
        response = httpx.Response(401, request=request)
        return litellm.AuthenticationError("bad key", llm_provider="fake", model=model, response=response)
    raise AssertionError(kind)


def _make_handler():
    from litellm import CustomLLM

    class Scripted(CustomLLM):
        """Plays a per-model script of faults; 'ok' replays the reference call, 'malformed' breaks it."""

        def completion(self, model, messages, *args, **kwargs):
            with _lock:
                CALLS.setdefault(model, []).append(time.monotonic())
                script = SCRIPTS[model]
                if not script:
                    raise AssertionError(f"fake/{model} ran out of script")
                step = script.pop(0)
            if step == "hang":  # no answer until the client's timeout (the trial's time left) runs out
                time.sleep(kwargs.get("timeout") or 0)
                raise _fault("timeout", model)
            if step in ("timeout", "429", "500", "401"):
                raise _fault(step, model)
            if step == "no_choice":  # a 200 whose reply holds no choice (seen from servers under load)
                import litellm

                response = litellm.ModelResponse(model=model)
                response.choices = []
                return response
            arguments = "{not json" if step == "malformed" else json.dumps(
                event_task()["reference_solution"]["tool_calls"][0]["arguments"])
            return tool_call_reply(model, "c1", "save_timeline_card", arguments)

    return Scripted()


register_provider("fake", _make_handler, [])


def run_with_script(tmp_path, model: str, script: list[str], trials: int = 1, task: dict | None = None,
                    **settings_values):
    SCRIPTS[f"{model}"] = list(script)
    CALLS.pop(model, None)
    suite = write_suite(tmp_path / "suite", [task or event_task()])
    settings = load_settings(PROJECT_ROOT, {"agent_model": f"fake/{model}", "trials": trials, "concurrency": 1,
                                        "cache": False, "retry_attempts": 3, **settings_values})
    plan = prepare(settings.evaluation, PROJECT_ROOT, [str(suite)])
    store = open_store(settings, PROJECT_ROOT)
    run, summary = execute(plan, store)
    return run, summary, store


@pytest.mark.parametrize("fault", ["timeout", "429", "500", "malformed", "no_choice"])
def test_transient_fault_is_retried_and_the_trial_passes(tmp_path, fault):
    run, summary, _ = run_with_script(tmp_path, f"recover-{fault}", [fault, "ok"])
    assert [t.status for t in run.trials] == ["passed"]
    assert len(CALLS[f"recover-{fault}"]) == 2
    assert summary["totals"]["errored"] == 0


@pytest.mark.parametrize("fault", ["timeout", "429", "500", "malformed", "no_choice"])
def test_persistent_fault_is_recorded_as_errored_and_the_run_completes(tmp_path, fault):
    run, summary, store = run_with_script(tmp_path, f"persist-{fault}", [fault] * 3 + ["ok"], trials=2)
    statuses = sorted(t.status for t in run.trials)
    assert statuses == ["errored", "passed"]
    errored = next(t for t in run.trials if t.status == "errored")
    assert "gave up after 3 attempts" in errored.error
    assert summary["totals"]["errored"] == 1
    assert summary["buckets"][0]["errored"] == 1
    assert summary["buckets"][0]["mean_score"] == 1.0, "errored trials must not count as failures"
    frame = store.trials.frame(run.run_id)
    assert sorted(frame["status"]) == ["errored", "passed"]


def test_rate_limit_waits_at_least_retry_after(tmp_path, monkeypatch):
    """The wait before the retry honours the 429's retry-after (0.2 s) although the backoff alone
    would be at most 0.0125 s; the wait asked for is recorded, not timed."""
    from optimizer.models.client import ModelClient

    waits: list[float] = []
    monkeypatch.setattr(ModelClient, "_sleep", lambda self, seconds: waits.append(seconds))
    run, _, _ = run_with_script(tmp_path, "retry-after", ["429", "ok"], retry_base_delay=0.01)
    assert run.trials[0].status == "passed" and len(CALLS["retry-after"]) == 2
    assert len(waits) == 1 and waits[0] >= 0.2, waits


def test_authentication_error_is_not_retried(tmp_path):
    run, _, _ = run_with_script(tmp_path, "auth", ["401", "ok"])
    assert run.trials[0].status == "errored"
    assert len(CALLS["auth"]) == 1
    assert "AuthenticationError" in run.trials[0].error


def test_a_trial_that_finishes_past_its_timeout_fails_with_score_zero_and_the_run_goes_on(tmp_path):
    """The model answers, slowly: the trial is the agent's failure, not a fault of the setup."""
    slow = event_task("slow", timeout_seconds=1)
    fast = event_task("fast")
    suite = write_suite(tmp_path / "suite", [slow, fast])
    settings = load_settings(PROJECT_ROOT, {"agent_model": "mock/oracle@1200ms", "concurrency": 2, "cache": False})
    run, summary = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), open_store(settings, PROJECT_ROOT))
    trials = {t.task_id: t for t in run.trials}
    assert {task: (t.status, t.score) for task, t in trials.items()} == {"slow": ("failed", 0.0),
                                                                         "fast": ("passed", 1.0)}
    assert trials["slow"].error == "ended: finished only after timeout_seconds=1 had passed"
    assert trials["slow"].transcript.tool_calls, "the conversation is kept"
    assert summary["totals"]["errored"] == 0


def test_a_provider_that_hangs_until_the_deadline_leaves_the_trial_errored_as_the_infrastructures(tmp_path):
    """The model was failing (its call being retried) when the time ran out: the provider's doing,
    so the gate's errored rule holds it against neither prompt (`scoring.spoiled`)."""
    from optimizer.scoring import spoiled

    run, summary, _ = run_with_script(tmp_path, "hang", ["hang", "ok"], task=event_task(timeout_seconds=1))
    trial = run.trials[0]
    assert (trial.status, trial.score) == ("errored", None)
    assert trial.error.startswith("infrastructure: TrialTimeout: ") and "while a model call was failing" in trial.error
    assert spoiled(trial)
    assert summary["totals"]["errored"] == 1 and summary["unfinished"] == []


def test_a_model_failing_every_call_leaves_every_trial_errored_and_eval_blames_the_setup(cli, tmp_path):
    SCRIPTS["down"] = ["500"] * 8  # 2 trials x 4 attempts
    suite = write_suite(tmp_path / "suite", [event_task()])
    out_json = tmp_path / "out.json"
    code, out, err = cli("eval", "--suite", str(suite), "--agent-model", "fake/down", "--trials", "2",
                         "--no-cache", "--json", str(out_json))
    assert code == 3, out + err
    assert "every trial errored: this points at the setup" in err
    summary = json.loads(out_json.read_text())
    assert summary["totals"]["errored"] == 2 and summary["buckets"][0]["mean_score"] is None
    assert all("gave up after" in error["error"] for error in summary["errors"])


def _trials_by_task(tmp_path, tasks, agent_name: str, release: threading.Event) -> dict:
    """Run `tasks` as a suite of `agent_name` two at a time; set `release` whatever happens (so a
    trial the runner gave up on can end); the trials by task id."""
    suite = write_suite(tmp_path / "suite", tasks, agent_name=agent_name)
    settings = load_settings(PROJECT_ROOT, {"agent_model": "mock/oracle", "concurrency": 2, "cache": False})
    try:
        run, _ = execute(prepare(settings.evaluation, PROJECT_ROOT, [str(suite)]), open_store(settings, PROJECT_ROOT))
    finally:
        release.set()
    return {trial.task_id: trial for trial in run.trials}


def test_a_trial_that_hangs_is_given_up_and_the_others_finish(tmp_path, monkeypatch):
    """An agent that blocks past its timeout does not hold the other trials up, and the runner
    records the hung trial as errored after its timeout and grace."""
    from optimizer.trials import runner
    from optimizer.trials.agent_run import AgentRun
    from optimizer.registry import agent
    from optimizer.types import Outcome, Transcript

    monkeypatch.setattr(runner, "GRACE_S", 0.2)
    monkeypatch.setattr(runner, "STUCK_CHECK_S", 0.1)
    release = threading.Event()

    @agent("test_hanging_agent", prompt_file="agents/prompts/card_agent.md")
    def hanging(context):
        if context.task.id == "hangs":
            release.wait(60)
        return AgentRun(transcript=Transcript(), outcome=Outcome(environment_state={}))

    tasks = [event_task("hangs", timeout_seconds=1, graders=[{"name": "card_completion"}]),
             *(event_task(f"quick_{n}", graders=[{"name": "card_completion"}]) for n in range(3))]
    by_task = _trials_by_task(tmp_path, tasks, "test_hanging_agent", release)
    assert len(by_task) == 4
    assert by_task["hangs"].status == "errored"
    assert "did not stop after its timeout_seconds" in by_task["hangs"].error
    assert all(by_task[f"quick_{n}"].status != "errored" for n in range(3))


def test_slow_graders_have_a_timeout_of_their_own_after_the_agent_ends(tmp_path, monkeypatch):
    """A slow judge on a slow machine is not the agent's time: an agent that ends in time is graded
    even when its graders take longer than what the agent left of `timeout_seconds`; graders that
    never finish are given up `timeout_seconds` (and the grace) after they began, and say so."""
    from optimizer.trials import runner
    from optimizer.trials.agent_run import AgentRun
    from optimizer.registry import agent, grader
    from optimizer.types import GraderResult, Outcome, Transcript

    monkeypatch.setattr(runner, "GRACE_S", 0.2)
    monkeypatch.setattr(runner, "STUCK_CHECK_S", 0.05)
    release = threading.Event()

    @agent("test_slowly_graded_agent", prompt_file="agents/prompts/card_agent.md")
    def quick(context):
        time.sleep(0.7)  # most of the 1 s the task allows
        return AgentRun(transcript=Transcript(), outcome=Outcome(environment_state={}))

    @grader("test_slow_grader", agent="test_slowly_graded_agent")
    def slow(task, trial, config):
        if task.id == "never_graded":
            release.wait(60)
        time.sleep(0.8)  # the agent's 0.7 s and this pass its 1 s, not its 1 s again
        return GraderResult(grader="test_slow_grader", score=1.0, passed=True)

    tasks = [event_task(name, timeout_seconds=1, graders=[{"name": "test_slow_grader"}])
             for name in ("graded", "never_graded")]
    by_task = _trials_by_task(tmp_path, tasks, "test_slowly_graded_agent", release)
    assert by_task["graded"].status == "passed" and by_task["graded"].score == 1.0
    assert by_task["never_graded"].status == "errored"
    assert by_task["never_graded"].error == runner.STUCK_GRADING


def test_a_sigterm_in_the_first_seconds_of_an_eval_leaves_no_run_running(cli, isolated, monkeypatch):
    """The first seconds of an uncached eval import litellm; a SIGTERM then used to leave a run
    recorded `running` until a later command closed it."""
    import os
    import signal
    import sqlite3

    from optimizer.trials import runner

    def stopped():
        os.kill(os.getpid(), signal.SIGTERM)  # the command's handler raises where Ctrl-C would
        time.sleep(5)

    monkeypatch.setattr(runner, "litellm_module", stopped)
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim", "--trials", "1", "--no-cache")
    assert code == 143 and "stopped by SIGTERM" in err, out + err
    with sqlite3.connect(isolated / "optimizer.db") as db:
        assert db.execute("select count(*) from runs where status = 'running'").fetchone() == (0,)
