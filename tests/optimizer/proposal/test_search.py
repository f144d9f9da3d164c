"""Search before the gate (`optimizer.proposal.search`): the adapter over the runner, the promotion rule,
skip-solved targets and the resumable pool. End-to-end cases run `optimizer run` on mock/sim with
the weak mock/patcher in a temporary repository; the pool cases drive gepa with a scripted runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.loop import candidate as loop_module
from optimizer.proposal.pool import Candidate, load_records, promote_candidates
from optimizer.proposal.screening import (COMPONENT, SCREEN_INDEX, Example, ScreeningAdapter, screening_sets,
                                          text_sha)
from optimizer.proposal.search import SearchProposer, parent_selector, run_search
from optimizer.suites import load_suites
from optimizer.trials.runner import plan
from optimizer.types import Trial
from tests.conftest import PROJECT_ROOT
from tests.helpers import project_repo

PROMPT = "agents/prompts/card_agent.md"
RULE = "Keep every fact exactly."


def card_items():
    suites = load_suites(["card_agent"], PROJECT_ROOT)
    return {(item.suite.name, item.task.id): item for item in plan(suites, trials=1) if item.task.split == "train"}


def scripted_run(passes):
    """A runner stand-in: a trial passes when `passes(task, prompt)`; records what it ran."""
    ran = []

    def run(planned, prompt, label):
        ran.extend((item.suite.name, item.task.id, item.index, prompt) for item in planned)
        return [Trial(suite=item.suite.name, task_id=item.task.id, bucket=item.task.bucket, split=item.task.split,
                      index=item.index, status="passed" if passes(item.task, prompt) else "failed",
                      score=1.0 if passes(item.task, prompt) else 0.0) for item in planned]
    return run, ran


def test_adapter_screens_at_indexes_of_its_own_and_reflects_only_failures():
    items = card_items()
    run, ran = scripted_run(lambda task, prompt: task.bucket != "fact_preservation" or RULE in prompt)
    adapter = ScreeningAdapter(items, run, targets={("card_agent", "fact_preservation")},
                               failures=lambda trials: [{"task_id": t.task_id} for t in trials if t.status == "failed"])
    fact = sorted(key for key, item in items.items() if item.task.bucket == "fact_preservation")
    batch = [Example(*fact[0]), Example(*fact[0], copy=1), Example(*fact[1])]
    result = adapter.evaluate(batch, {COMPONENT: "base"}, capture_traces=True)
    assert result.scores == [0.0, 0.0, 0.0] and len(result.trajectories) == 3
    assert [index for *_, index, _ in ran] == [SCREEN_INDEX, SCREEN_INDEX + 1, SCREEN_INDEX]
    dataset = adapter.make_reflective_dataset({COMPONENT: "base"}, result, [COMPONENT])
    assert [row["task_id"] for row in dataset[COMPONENT]] == [fact[0][1], fact[0][1], fact[1][1]]
    assert adapter.evaluate(batch, {COMPONENT: f"base\n{RULE}"}).scores == [1.0, 1.0, 1.0]
    state = adapter.get_adapter_state()
    fresh = ScreeningAdapter(items, run, targets=set(), failures=lambda trials: [])
    fresh.set_adapter_state(state)
    assert fresh.plan([fact[0]])[0].index == SCREEN_INDEX + 4, "a resumed adapter never reuses an index"


def test_screening_sets_hold_train_tasks_only_and_repeat_a_small_target():
    items = card_items()
    planned = plan(load_suites(["card_agent"], PROJECT_ROOT), trials=1)
    train, val = screening_sets(planned, {("card_agent", "trivial_input")}, "card_agent", budget=10_000)
    assert len(train) == 4 and len({example.key for example in train}) == 1
    assert all(items.get(example.key) is not None for example in val), "holdout tasks are never screened"
    assert len(val) == len(train) + len(items) - 1
    small_train, small_val = screening_sets(planned, {("card_agent", "trivial_input")}, "card_agent", budget=20)
    assert small_val == small_train, "a small budget screens the targets only"


def pool_search(folder: Path, budget: int, records: list[Candidate] | None = None, log=lambda message: None,
                **resumed):
    items = card_items()
    run, ran = scripted_run(lambda task, prompt: task.bucket != "fact_preservation" or RULE in prompt)
    adapter = ScreeningAdapter(items, run, targets={("card_agent", "fact_preservation")},
                               failures=lambda trials: [{"task_id": t.task_id} for t in trials if t.status == "failed"])
    answers = iter([f"base\nUseless rule {n}." for n in range(1, 4)] + [f"base\n{RULE}"] * 10)

    def propose(path, parent, number):
        return next(answers) if "\n" not in parent else None, "a rationale", None

    proposer = SearchProposer(adapter, render=lambda prompt, failures: f"request for {failures}", propose=propose,
                              check=lambda text: None, diff=lambda text: text, records=records or [],
                              folder=folder, log=log)
    train, val = screening_sets(plan(load_suites(["card_agent"], PROJECT_ROOT), trials=1),
                                {("card_agent", "fact_preservation")}, "card_agent", budget=budget)
    return run_search(adapter, proposer, base_prompt="base", train=train, val=val, budget=budget,
                      folder=folder, seed=0, **resumed), ran


def test_a_search_whose_proposer_has_nothing_new_ends_instead_of_spending_its_budget(tmp_path):
    """The `example` format with one example to show: every later proposal is that prompt again.
    After two such candidates in a row the search ends, its budget mostly unspent."""
    from optimizer.proposal.search import UNCHANGED_IN_A_ROW

    items = card_items()
    run, ran = scripted_run(lambda task, prompt: False)
    adapter = ScreeningAdapter(items, run, targets={("card_agent", "fact_preservation")},
                               failures=lambda trials: [{"task_id": t.task_id} for t in trials])
    said: list[str] = []
    proposer = SearchProposer(adapter, render=lambda prompt, failures: "request",
                              propose=lambda path, parent, number: ("base\nThe one example.", "", None),
                              check=lambda text: None, diff=lambda text: text, records=[],
                              folder=tmp_path, log=said.append)
    train, val = screening_sets(plan(load_suites(["card_agent"], PROJECT_ROOT), trials=1),
                                {("card_agent", "fact_preservation")}, "card_agent", budget=200)
    outcome = run_search(adapter, proposer, base_prompt="base", train=train, val=val, budget=200,
                         folder=tmp_path / "pool", seed=0)
    statuses = [c.status for c in outcome.candidates]
    assert statuses[-UNCHANGED_IN_A_ROW:] == ["unchanged"] * UNCHANGED_IN_A_ROW
    assert len(statuses) <= 1 + UNCHANGED_IN_A_ROW + 1
    assert len(ran) < 100, f"{len(ran)} screening trials of a budget of 200"
    assert f"search: {UNCHANGED_IN_A_ROW} candidates in a row unchanged, nothing new to screen: the search ends" \
        in said


def test_the_right_candidate_is_promoted_and_useless_ones_are_not(tmp_path):
    outcome, _ = pool_search(tmp_path / "pool", budget=60)
    right = [c for c in outcome.candidates if c.text.endswith(RULE)]
    assert right and outcome.promoted == right[:1]
    assert all(c.status in ("screened_out", "not_promoted") for c in outcome.candidates if c not in right)
    assert outcome.base_target_score == 0.0 and right[0].target_score == 1.0


def test_a_new_candidate_is_logged_as_made_not_as_screened_out_before_its_screening(tmp_path):
    said: list[str] = []
    outcome, _ = pool_search(tmp_path / "pool", budget=60, log=said.append)
    kept = [c for c in outcome.candidates if c.status in ("pool", "promoted", "not_promoted")]
    assert kept, "the right rule stays in gepa's pool"
    made = [line for line in said if line.startswith(f"search candidate {kept[0].number}:")]
    assert made == [f"search candidate {kept[0].number}: made, screened on gepa's minibatch next"]
    assert not any(line.endswith(": screened_out") for line in said)


def test_promotion_needs_clear_screening_evidence_and_skips_a_candidate_carrying_an_earlier_ones_lines():
    """Of four pool members beating the base prompt on the targets: one only by a hair (not
    promoted: its gain could be luck), the narrowest clear one first, then not its descendant
    (every line of it and one more) but the other clear one."""
    from types import SimpleNamespace

    items = card_items()
    targets = {("card_agent", "fact_preservation")}
    fact = sorted(key for key, item in items.items() if item.task.bucket == "fact_preservation")
    val = [Example(*key, copy) for copy in range(4) for key in fact]
    base = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    pool = {"base": base,
            "base\nA sentence that changes nothing.": [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0],
            f"base\n{RULE}": [1.0] * 8,
            f"base\n{RULE}\nNever mention the weather.": [1.0] * 8,
            "base\nKeep each fact as written.\nKeep it short.": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]}
    texts = list(pool)
    result = SimpleNamespace(candidates=[{COMPONENT: text} for text in texts],
                             val_subscores=[dict(enumerate(pool[text])) for text in texts])
    records = [Candidate(number=n, sha=text_sha(text), parent=text_sha("base"), status="screened_out",
                         diff="".join(f"+{line}\n" for line in text.splitlines()[1:]), text=text)
               for n, text in enumerate(texts[1:], 1)]
    outcome = promote_candidates(result, records, val, targets, items, limit=2)
    luck, right, descendant, other = records
    assert [c.number for c in outcome.promoted] == [right.number, other.number]
    assert luck.status == "not_promoted" and "not clearly above" in luck.reason
    assert descendant.status == "not_promoted" and f"candidate {right.number}" in descendant.reason


def test_a_candidate_carrying_the_lines_of_one_the_gate_found_harmful_is_not_promoted():
    """In a continued pool: the gate rejected candidate 1 for harm and candidate 2 for not
    improving its target; a child of 1 is not promoted, a child of 2 is."""
    from types import SimpleNamespace

    items = card_items()
    fact = sorted(key for key, item in items.items() if item.task.bucket == "fact_preservation")
    val = [Example(*key, copy) for copy in range(4) for key in fact]
    harmful, weak = "base\nNever mention the weather.", "base\nBe brief."
    texts = ["base", f"{harmful}\n{RULE}", f"{weak}\n{RULE}"]
    result = SimpleNamespace(candidates=[{COMPONENT: text} for text in texts],
                             val_subscores=[dict(enumerate([0.0] * 8)), dict(enumerate([1.0] * 8)),
                                            dict(enumerate([1.0] * 8))])

    def record(number, text, **fields):
        return Candidate(number=number, sha=text_sha(text), parent=text_sha("base"), text=text,
                         diff="".join(f"+{line}\n" for line in text.splitlines()[1:]), **fields)

    records = [record(1, harmful, status="rejected_gate", failed_rules=["no_harm"]),
               record(2, weak, status="rejected_gate", failed_rules=["improvement"]),
               record(3, texts[1], status="screened_out"), record(4, texts[2], status="screened_out")]
    outcome = promote_candidates(result, records, val, {("card_agent", "fact_preservation")}, items, limit=2)
    assert [c.number for c in outcome.promoted] == [4]
    assert records[2].status == "not_promoted" and "candidate 1" in records[2].reason


def test_gepa_never_picks_a_parent_carrying_the_lines_the_gate_found_harmful():
    from types import SimpleNamespace

    harmful = "base\nNever mention the weather."
    texts = ["base", harmful, f"{harmful}\n{RULE}", f"base\n{RULE}"]
    refused = Candidate(number=1, sha=text_sha(harmful), parent=text_sha("base"), status="rejected_gate",
                        diff="+Never mention the weather.\n", text=harmful, failed_rules=["no_harm"])
    state = SimpleNamespace(program_candidates=[{COMPONENT: text} for text in texts],
                            per_program_tracked_scores=[0.2, 0.9, 1.0, 0.8],
                            get_pareto_front_mapping=lambda: {0: {1, 2}, 1: {2, 3}, 2: {0, 1}})
    selector = parent_selector([refused], seed=0)
    assert {selector.select_candidate_idx(state) for _ in range(50)} <= {0, 3}
    assert 3 in {selector.select_candidate_idx(state) for _ in range(50)}
    state.get_pareto_front_mapping = lambda: {0: {1, 2}}
    assert selector.select_candidate_idx(state) == 0, "with every front member barred, the base prompt"


def test_targets_are_ranked_by_failing_tasks_not_by_failed_trials():
    """A task alone in its bucket runs five times the trials of the others: 8 failures in its 20
    trials (0.4 of a task failing per round) rank below two tasks failing half of their 4 each."""
    from optimizer.proposal.request import select_targets

    items = card_items()
    suites = load_suites(["card_agent"], PROJECT_ROOT)

    def trials(bucket, runs, failed):
        keys = sorted(key for key, item in items.items() if item.task.bucket == bucket)
        return [Trial(suite=suite, task_id=task, bucket=bucket, split="train", index=index,
                      status="failed" if index < failed else "passed", score=0.5 if index < failed else 1.0)
                for suite, task in keys for index in range(runs)]

    baseline = trials("trivial_input", 20, 8) + trials("fact_preservation", 4, 2)
    selection = select_targets(baseline, suites, max_targets=2)
    assert [t.bucket for t in selection.targets] == ["fact_preservation", "trivial_input"]
    assert [t.failed for t in selection.targets] == [4, 8]


def test_a_promoted_candidate_is_gated_only_on_the_targets_its_screening_shows_gain_on():
    """Two targets: the candidate lifts fact_preservation, while template_metric passes every
    screening trial with either prompt. The gate would require both to improve and metric
    cannot, so the candidate goes to the gate for fact_preservation alone (metric is then one of
    the buckets it is checked for harm on); a candidate with no clear gain on any target is
    judged on the one that comes closest."""
    from types import SimpleNamespace

    from optimizer.proposal.pool import gate_targets

    items = card_items()
    targets = {("card_agent", "fact_preservation"), ("card_agent", "template_metric")}
    keys = sorted(key for key, item in items.items() if (key[0], item.task.bucket) in targets)
    val = [Example(*key, copy) for copy in range(4) for key in keys]
    fact = [i for i, example in enumerate(val) if items[example.key].task.bucket == "fact_preservation"]
    base = [0.0 if i in fact and i % 2 else 1.0 for i in range(len(val))]
    texts = ["base", f"base\n{RULE}"]
    result = SimpleNamespace(candidates=[{COMPONENT: text} for text in texts],
                             val_subscores=[dict(enumerate(base)), dict(enumerate([1.0] * len(val)))])
    record = Candidate(number=1, sha=text_sha(texts[1]), parent=text_sha("base"), status="screened_out",
                       diff=f"+{RULE}\n", text=texts[1])
    outcome = promote_candidates(result, [record], val, targets, items, limit=2)
    assert outcome.promoted == [record]
    assert record.gate_targets == ["card_agent/fact_preservation"]
    assert "card_agent/template_metric screened 1.00, base 1.00" in record.reason

    fact_key, metric_key = ("card_agent", "fact_preservation"), ("card_agent", "template_metric")
    kept, dropped = gate_targets({fact_key: [1.0, 0.5, 1.0], metric_key: [1.0, 1.0, 0.5]},
                                 {fact_key: [0.5, 1.0, 0.5, 1.0], metric_key: [1.0, 1.0, 1.0, 0.5]}, targets)
    assert kept == ["card_agent/fact_preservation"] and [name for name, *_ in dropped] == ["card_agent/template_metric"]
    kept, dropped = gate_targets({fact_key: [1.0, 0.5, 1.0], metric_key: [1.0, 1.0]},
                                 {fact_key: [1.0, 0.5, 0.5, 1.0], metric_key: [1.0, 0.5]}, targets)
    assert kept == ["card_agent/template_metric"] and [name for name, *_ in dropped] == [
        "card_agent/fact_preservation"], "no target clear: the one closest to it"
    kept, dropped = gate_targets({fact_key: [1.0, 1.0], metric_key: [0.5, 0.5]},
                                 {fact_key: [1.0, 1.0], metric_key: [1.0, 0.5]}, targets)
    assert kept == ["card_agent/fact_preservation", "card_agent/template_metric"] and not dropped, \
        "no gain on any target: every target, and the gate rejects it"


def test_targets_rank_on_every_recorded_trial_of_the_base_prompt(tmp_path):
    """The baseline's two trials per task say fact_preservation fails most; the accepted
    candidate whose prompt is now the base prompt ran 12 more of it that all passed, in a run
    made at another commit. Target selection counts those and picks template_metric. Trials of
    another prompt, of a task whose file changed since, and of a run finished after the first
    iteration on this base commit began (so every iteration on it ranks alike) do not count."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from optimizer.settings.loading import load_settings
    from optimizer.loop.staging import Stage
    from optimizer.proposal.request import select_targets
    from optimizer.trials.run_spec import fingerprints
    from optimizer.store import Store, default_url
    from optimizer.types import RunResult

    suites = load_suites(["card_agent"], PROJECT_ROOT)
    planned = plan(suites, trials=2)
    store = Store(default_url(tmp_path))
    result = SimpleNamespace(base=SimpleNamespace(commit="1" * 40))
    stage = Stage(SimpleNamespace(store=store), load_settings(PROJECT_ROOT).runner, suites, planned, result,
                  PROJECT_ROOT)
    spec = stage.spec
    items = card_items()

    def trials(bucket, indexes, failed):
        return [Trial(suite=suite, task_id=task, bucket=bucket, split="train", index=index,
                      status="failed" if failed(index) else "passed", score=0.5 if failed(index) else 1.0)
                for suite, task in sorted(k for k, item in items.items() if item.task.bucket == bucket)
                for index in indexes]

    def record(run_id, fingerprints, trial_list):
        store.runs.start(RunResult(run_id=run_id, started_at=datetime.now(timezone.utc), fingerprints=fingerprints),
                         kind="candidate")
        for trial in trial_list:
            store.trials.record(run_id, trial)
        store.runs.finish(run_id, "completed", {})
        store.flush()

    baseline = trials("fact_preservation", [0, 1], lambda i: True) + trials("template_metric", [0, 1], lambda i: i == 0)
    assert [t.bucket for t in select_targets(baseline, suites).targets] == ["fact_preservation"]
    record("accepted", {**spec, "git": {"commit": "0" * 40, "dirty": False}},
           trials("fact_preservation", range(2, 14), lambda i: False))
    other_prompt = json.loads(json.dumps(spec))
    other_prompt["agents"]["card_agent"]["prompt"] = "another"
    record("other-prompt", other_prompt, trials("template_metric", range(2, 40), lambda i: False))
    changed = json.loads(json.dumps(spec))
    for key in changed["tasks"]:
        if "metric" in key:
            changed["tasks"][key]["file"] = "edited"
    record("task-edited", changed, trials("template_metric", range(40, 80), lambda i: False))
    store.iterations.start("it-1", kind="run", base_commit="1" * 40, settings={})
    store.flush()
    record("during-the-iteration", spec, trials("template_metric", range(80, 90), lambda i: True))
    evidence = stage.evidence(baseline)
    assert len(evidence) == len(baseline) + 2 * 12, "runs finished after the base's first iteration began are left out"
    assert [t.bucket for t in select_targets(evidence, suites).targets] == ["template_metric"]


def test_a_search_that_promoted_nothing_counts_toward_the_buckets_patience(tmp_path):
    """Two searches at one base commit that sent nothing to the gate set their targets aside,
    as two rejected proposals would; an iteration whose proposal the gate rejected is counted
    once, through its proposal, and other base commits do not count."""
    from optimizer.proposal.request import exhausted_buckets
    from optimizer.store.proposals import ProposalRow
    from optimizer.store import Store, default_url

    store = Store(default_url(tmp_path))
    base, other = "a" * 40, "b" * 40
    for number, (commit, targets, proposed) in enumerate([
            (base, ["card_agent/template_metric"], False), (base, ["card_agent/template_metric"], False),
            (base, ["card_agent/template_quote"], True), (other, ["card_agent/template_quote"], False)]):
        iteration = f"it-{number}"
        store.iterations.start(iteration, kind="run", base_commit=commit, settings={})
        store.iterations.set_targets(iteration, agent="card_agent", targets=targets, baseline_run_id=None)
        if proposed:
            store.proposals.add(ProposalRow(iteration_id=iteration, ordinal=1, agent="card_agent", branch="b",
                                            proposer="llm", status="rejected_gate", reason="no gain"))
        store.iterations.finish(iteration, "rejected")
    store.flush()
    unproposed = store.iterations.rejected_unproposed(base)
    assert [row["iteration_id"] for row in unproposed] == ["it-0", "it-1"]
    rows = store.proposals.rejected() + unproposed
    assert exhausted_buckets(rows, base, 2) == {("card_agent", "template_metric")}
    assert [row["iteration_id"] for row in store.iterations.rejected_unproposed(other)] == ["it-3"]
    assert exhausted_buckets(rows, base, 1) == {("card_agent", "template_metric"), ("card_agent", "template_quote")}


def test_a_resumed_search_continues_the_pool(tmp_path):
    folder = tmp_path / "pool"
    first, ran_first = pool_search(folder, budget=30)
    records = load_records(folder)
    assert len(records) == len(first.candidates) >= 1
    state = json.loads((folder / "gepa" / "candidates.json").read_text())
    second, ran_second = pool_search(folder, budget=30, records=records)
    assert all(prompt != "base" or index >= SCREEN_INDEX for _, _, index, prompt in ran_second)
    assert ("base" not in {prompt for *_, prompt in ran_second}) or len(ran_second) < len(ran_first), \
        "the base prompt's first screen is not repeated"
    assert len(json.loads((folder / "gepa" / "candidates.json").read_text())) >= len(state)
    assert [c.number for c in second.candidates][: len(records)] == [r.number for r in records]


def test_a_search_run_in_place_of_an_interrupted_one_spends_the_budget_once(tmp_path):
    """An iteration killed after its search, resumed by another, screens no new trial (the
    budget counts from where the interrupted one started); a later iteration gets a budget of
    its own."""
    folder = tmp_path / "pool"
    first, ran_first = pool_search(folder, budget=30, iteration="killed")
    assert ran_first and first.rollouts >= 30
    again, ran_again = pool_search(folder, budget=30, records=load_records(folder), iteration="resumed",
                                   resumes=["killed"])
    assert set(ran_again) <= set(ran_first), "only trials the killed search ran (the loop takes them in)"
    assert [c.number for c in again.candidates] == [c.number for c in first.candidates]
    assert json.loads((folder / "starts.json").read_text()) == {"killed": 0, "resumed": 0}
    later, ran_later = pool_search(folder, budget=30, records=load_records(folder), iteration="later")
    assert ran_later and later.rollouts >= 30


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    root = project_repo(tmp_path / "repo")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    monkeypatch.setenv("OPTIMIZER_PATCHER_MODEL", "mock/patcher")
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "0.5")
    monkeypatch.setenv("OPTIMIZER_SIM_NOISE", "independent")
    monkeypatch.setenv("OPTIMIZER_SEARCH_ROLLOUTS", "120")
    monkeypatch.setenv("OPTIMIZER_PATCH_FORMAT", "edits")
    return root


def test_the_gate_never_judges_on_a_screening_trial(cli, repo, tmp_path, monkeypatch):
    screened, judged = set(), set()
    real_plan, real_compare = ScreeningAdapter.plan, loop_module.compare

    def spy_plan(self, keys):
        planned = real_plan(self, keys)
        screened.update((p.suite.name, p.task.id, p.index) for p in planned)
        return planned

    def spy_compare(sides, **kwargs):
        class Spy:
            def base(self, planned, label):
                judged.update((p.suite.name, p.task.id, p.index) for p in planned)
                return sides.base(planned, label)

            def candidate(self, planned, label):
                judged.update((p.suite.name, p.task.id, p.index) for p in planned)
                return sides.candidate(planned, label)

            def ran(self):
                return sides.ran()
        return real_compare(Spy(), **kwargs)

    from optimizer.proposal.llm import LLMProposer

    real_propose, sampled = LLMProposer.propose, []

    def spy_propose(self, request):
        sampled.append(request.sample)
        return real_propose(self, request)

    monkeypatch.setattr(ScreeningAdapter, "plan", spy_plan)
    monkeypatch.setattr(loop_module, "compare", spy_compare)
    monkeypatch.setattr(LLMProposer, "propose", spy_propose)
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "1.0")  # the right rule every time: some candidate is gated
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    search = summary["search"]
    assert search and search["candidates"], summary
    assert any(c["status"] not in ("screened_out", "not_promoted", "no_patch", "unchanged", "rejected_check")
               for c in search["candidates"]), "some candidate reached the gate"
    assert screened and judged
    assert not screened & judged, "the gate judged on screening trials"
    assert sampled and all(sampled), "every search candidate is a sample of the patcher"
    # a patcher that writes the right rule every time soon has nothing new: the search then ends early
    ended = "candidates in a row unchanged, nothing new to screen: the search ends" in err
    assert summary["screen_rollouts"] >= (1 if ended else 120)
    report = Path(summary["report"]).read_text()
    assert "## Search:" in report and "| # | status |" in report
    code, out, err = cli("review", summary["proposals"][0]["branch"])
    assert code == 0 and "search candidate" in out


def test_after_an_accept_the_baseline_takes_in_the_gates_trials_and_fresh_trials_are_fresh(cli, repo, tmp_path,
                                                                                            monkeypatch):
    """The accepted candidate's gate ran its prompt, now the base prompt, at the baseline's
    indexes of most tasks: the next baseline takes those trials in and runs only the rest. Every
    trial of the base prompt that the next iteration's screening or gate runs is at an index no
    recorded trial of it holds, so none is an answer target selection saw served again by the
    response cache (each makes its own model call)."""
    from optimizer.settings.loading import load_settings
    from optimizer.store import open_store

    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "1.0")
    code, out, err = cli("run", "--json", str(tmp_path / "first.json"))
    first = json.loads((tmp_path / "first.json").read_text())
    assert code == 0 and first["status"] == "accepted", out + err[-3000:]
    code, out, err = cli("review", "--merge")
    assert code == 0, out + err
    store = open_store(load_settings(repo), repo)
    accepted = next(row for row in store.proposals.rows() if row["status"] == "accepted")

    def runs_of(prompt):
        """(run id, kind) of every run of the card agent with `prompt`."""
        return [(row["run_id"], row["kind"]) for row in store.runs.rows("run_id", "kind", "fingerprints_json")
                if row["fingerprints"]["agents"]["card_agent"]["prompt"] == prompt]

    prompt = store.runs.get(accepted["candidate_run_id"])["fingerprints"]["agents"]["card_agent"]["prompt"]
    gate_trials = {(t.suite, t.task_id, t.index): t for t in store.trials.load(accepted["candidate_run_id"])}
    before = runs_of(prompt)
    seen = {(t.suite, t.task_id, t.index) for run_id, _ in before for t in store.trials.load(run_id)}

    code, out, err = cli("run", "--json", str(tmp_path / "second.json"))
    assert code == 0, out + err[-3000:]
    second = json.loads((tmp_path / "second.json").read_text())
    baseline = store.trials.load(second["baseline_run_id"])
    taken = [t for t in baseline if (t.suite, t.task_id, t.index) in gate_trials]
    assert taken and len(taken) < len(baseline)
    assert all(t.score == gate_trials[(t.suite, t.task_id, t.index)].score for t in taken)
    assert f"({len(taken)} more recorded with the same prompts, taken in)" in err.replace("\n", " ")
    fresh = [t for run_id, kind in runs_of(prompt) if (run_id, kind) not in before and kind in ("confirm", "screen")
             for t in store.trials.load(run_id)]
    indexes = {t.index for t in fresh}
    assert min(indexes) < SCREEN_INDEX <= max(indexes), "the second iteration screened and gated"
    assert not {(t.suite, t.task_id, t.index) for t in fresh} & seen
    assert all(t.transcript.usage.calls > 0 for t in fresh), "a fresh trial was served from the cache"


def test_a_sampled_proposal_draws_at_the_patcher_temperature_with_a_seed_of_its_own(tmp_path):
    """Several proposals for one iteration are sampled (`patcher_temperature`), each with its own
    seed from the settings' seed, the request and its ordinal: they differ, and a rerun of the same
    request draws the same. A single proposal is greedy."""
    from optimizer.settings.loading import load_settings
    from optimizer.proposal.make import make_proposer
    from optimizer.proposal.proposers import ProposalRequest

    settings = load_settings(PROJECT_ROOT).model_copy(update={"patcher_temperature": 0.9, "seed": 3})
    proposer = make_proposer(settings.proposal)

    def request(ordinal, sample=True, text="the request"):
        return ProposalRequest(request=text, request_path=tmp_path / "request.md", prompt_file="prompt.md",
                               workdir=tmp_path, ordinal=ordinal, sample=sample)

    assert proposer._sampling(request(1, sample=False)) == {"temperature": 0.0}
    first, second = proposer._sampling(request(1)), proposer._sampling(request(2))
    assert first["temperature"] == second["temperature"] == 0.9
    assert first["seed"] != second["seed"] and first == proposer._sampling(request(1))
    assert first["seed"] != proposer._sampling(request(1, text="another request"))["seed"]
    other_seed = make_proposer(settings.model_copy(update={"seed": 4}).proposal)
    assert other_seed._sampling(request(1))["seed"] != first["seed"]


def test_a_target_whose_fresh_confirmation_passes_is_skipped(cli, repo, tmp_path, monkeypatch):
    real_confirm = ScreeningAdapter.confirm
    first: list[str] = []

    def confirm(self, prompt, keys, trials):
        result = real_confirm(self, prompt, keys, trials)
        if not first:  # the first target confirmed: every fresh trial passes
            first.extend({key[1] for key in keys})
            return [trial.model_copy(update={"status": "passed", "score": 1.0}) for trial in result]
        return [trial.model_copy(update={"status": "failed", "score": 0.5}) if index < 2 else trial
                for index, trial in enumerate(result)]  # the next ones still fail

    monkeypatch.setattr(ScreeningAdapter, "confirm", confirm)
    monkeypatch.setenv("OPTIMIZER_SEARCH_ROLLOUTS", "30")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    assert len(summary["skipped_targets"]) == 1
    skipped = summary["skipped_targets"][0]
    assert f"targets: {skipped}" not in err.replace("\n", " ")
    assert "targets: card_agent/" in err.replace("\n", " ")


def test_a_search_budget_too_small_to_screen_is_refused(cli, repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_SEARCH_ROLLOUTS", "5")
    code, out, err = cli("run")
    assert code != 0 and "search_rollouts" in out + err

