"""A hand-built store for the viewer's tests and benchmark: a baseline, a candidate whose
outcomes differ on chosen pairs, an iteration with its accepted proposal, and a night."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from optimizer.store import Store
from optimizer.store.proposals import ProposalRow
from optimizer.types import GraderResult, Outcome, RunResult, ToolCall, Transcript, Trial

START = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
INJECTION = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"
DIFF = "--- a/agents/prompts/card_agent.md\n+++ b/agents/prompts/card_agent.md\n@@ -1 +1,2 @@\n # Card Agent\n" \
       "+Keep every fact of the note.\n"


def trial(task: str, index: int, status: str, bucket: str = "fact_preservation", note: str = "Standup at 10:30",
          error: str | None = None) -> Trial:
    """A trial with a full transcript: system prompt, user note, a tool call and its result."""
    call = ToolCall(id="call_1", name="save_timeline_card", arguments={"title": note}, result="saved")
    messages = [{"role": "system", "content": "# Card Agent\nTurn a note into a card."},
                {"role": "user", "content": note},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "save_timeline_card", "arguments": f'{{"title": "{note}"}}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "saved"}]
    passed = status == "passed"
    return Trial(suite="card_agent", task_id=task, bucket=bucket, split="train" if index % 4 else "holdout",
                 index=index, status=status, score=1.0 if passed else 0.0 if status == "failed" else None,
                 error=error, duration_s=1.5,
                 transcript=Transcript(messages=messages, tool_calls=[call], model="mock/sim"),
                 outcome=Outcome(environment_state={"cards": [{"title": note}]}),
                 grader_results=[GraderResult(grader="card_must_contain", score=1.0 if passed else 0.0,
                                              passed=passed, rationale=f"checked {note!r}")])


def add_run(store: Store, run_id: str, kind: str, trials: list[Trial], minute: int) -> str:
    run = RunResult(run_id=run_id, started_at=START + timedelta(minutes=minute), trials=trials)
    store.runs.start(run, kind=kind)
    for item in trials:
        store.trials.record(run_id, item)
    store.runs.finish(run_id, "completed", {"totals": {"trials": len(trials)}, "buckets": []})
    return run_id


def build(store: Store, *, tasks: int = 4, trials_per_task: int = 2, nights: int = 1) -> dict[str, str]:
    """Per night: a baseline where every task's trials fail except task 0's, and a candidate
    where task 1's pass too (the changed pairs), with the iteration accepting the patch."""
    ids: dict[str, str] = {}
    for night in range(nights):
        minute = night * 24 * 60
        base = [trial(f"card_task_{t}", i, "passed" if t == 0 else "failed", note=INJECTION if t == 1 else "Standup")
                for t in range(tasks) for i in range(trials_per_task)]
        cand = [item.model_copy(update={"status": "passed", "score": 1.0}) if item.task_id == "card_task_1" else item
                for item in base]
        iteration_id = f"it-{night}"
        store.iterations.start(iteration_id, kind="run", base_ref="main", base_commit="c0ffee" * 7, settings={})
        ids["baseline"] = add_run(store, f"base-{night}", "baseline", base, minute)
        ids["candidate"] = add_run(store, f"cand-{night}", "candidate", cand, minute + 5)
        store.iterations.set_targets(iteration_id, agent="card_agent", targets=["card_agent/fact_preservation"],
                                     baseline_run_id=ids["baseline"])
        store.proposals.add(ProposalRow(iteration_id=iteration_id, ordinal=1, agent="card_agent",
                                        branch=f"optimizer/{iteration_id}/card_agent-1", proposer="llm",
                                        status="accepted", reason="accepted", diff=DIFF,
                                        rationale="Facts were paraphrased away.",
                                        candidate_run_id=ids["candidate"],
                                        decision={"rules": [{"rule": "improvement", "passed": True,
                                                             "reason": "fact_preservation improved"}],
                                                  "buckets": []}))
        store.iterations.finish(iteration_id, "accepted", {"rollouts": len(cand)})
        ids["iteration"] = iteration_id
    store.flush()
    return ids


def add_reusing_night(store: Store, night: int = 0) -> dict[str, str]:
    """A second iteration on night `night`'s base, as a nightly runs one: its gate paired its
    candidate with the base prompt's fresh trials that the night's first iteration ran (a confirm
    run started before this iteration did, so outside its time window), as its summary records.
    card_task_2 falls (passed -> failed), card_task_3 (bucket template_event) rises; then the
    night's record holding both iterations."""
    minute = night * 24 * 60
    fresh = [trial(f"card_task_{t}", i, "passed" if t in (0, 2) else "failed",
                   bucket="template_event" if t == 3 else "fact_preservation", note="Standup")
             for t in range(4) for i in (2, 3)]
    confirm = add_run(store, f"confirm-{night}", "confirm", fresh, minute + 3)
    candidate = [item.model_copy(update={"status": "failed", "score": 0.0}) if item.task_id == "card_task_2" else
                 item.model_copy(update={"status": "passed", "score": 1.0}) if item.task_id == "card_task_3" else item
                 for item in fresh]
    iteration_id = f"it-{night}-b"
    store.iterations.start(iteration_id, kind="run", base_ref="main", base_commit="c0ffee" * 7, settings={})
    run_id = add_run(store, f"cand-{night}-b", "candidate", candidate, minute + 12)
    store.iterations.set_targets(iteration_id, agent="card_agent", targets=["card_agent/template_event"],
                                 baseline_run_id=f"base-{night}")
    store.proposals.add(ProposalRow(  # the loop numbers proposals across the store: this is the second
        iteration_id=iteration_id, ordinal=2, agent="card_agent", branch=f"optimizer/{iteration_id}/card_agent-2",
        proposer="llm", status="rejected_gate", reason="fact_preservation fell", diff=DIFF, rationale="Events.",
        candidate_run_id=run_id,
        decision={"accepted": False, "mode": "strict", "stage": "harm",
                  "rules": [{"rule": "no_regression", "passed": False, "reason": "fact_preservation fell"}],
                  "buckets": [{"suite": "card_agent", "bucket": "template_event", "targeted": True, "kind": "bucket",
                               "pairs": 2, "before": 0.0, "after": 1.0, "change": 1.0, "verdict": "improved"},
                              {"suite": "card_agent", "bucket": "fact_preservation", "targeted": False,
                               "kind": "bucket", "pairs": 6, "before": 0.67, "after": 0.33, "change": -0.33,
                               "verdict": "harmed"}]}))
    store.iterations.finish(iteration_id, "rejected", {"rollouts": len(candidate), "base_runs": [confirm]})
    nightly_id = f"night-{night}"
    state = {"status": "finished", "stop_reason": "max_iterations (2)", "spent_usd": 0.0, "spent_tokens": 0,
             "iterations": [{"number": 1, "iteration_id": f"it-{night}", "status": "accepted", "agent": "card_agent",
                             "targets": ["card_agent/fact_preservation"], "verdict": "merge", "reason": "accepted",
                             "rollouts": 8},
                            {"number": 2, "iteration_id": iteration_id, "status": "rejected", "agent": "card_agent",
                             "targets": ["card_agent/template_event"], "verdict": None,
                             "reason": "fact_preservation fell", "rollouts": 8}]}
    store.nightlies.start(nightly_id, branch=f"optimizer/nightly-{night}", base_ref="main",
                          base_commit="c0ffee" * 7, settings={}, state=state)
    store.nightlies.save(nightly_id, "finished", "c0ffee" * 7, state)
    store.flush()
    return {"iteration": iteration_id, "candidate": run_id, "confirm": confirm, "night": nightly_id}
