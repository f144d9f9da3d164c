"""mock/sim is prompt-sensitive: the right general rule raises a bucket, other text does not; the
rule texts stand-in patchers write score as they claim; the weak mock/patcher draws among them."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from dataclasses import replace

import pytest

from prompt_optimizer_agents.card.sim import PROFILE
from optimizer.errors import InputError
from optimizer.trials.sim import check_rule_texts, decide, load_rule_texts
from optimizer.suites import load_suite
from optimizer.proposal.weak_patcher import weak_answer
from tests.conftest import PROJECT_ROOT
from tests.helpers import git, project_repo

BASE_PROMPT = (PROJECT_ROOT / "agents/prompts/card_agent.md").read_text()
EVENT_RULE = "When a note names a meeting or appointment with a concrete future time, use event."
CONTRADICTION = "Never use event for a meeting, even with a scheduled time."
IRRELEVANT = "Write titles in sentence case and keep them under sixty characters."


@pytest.fixture(scope="module")
def event_task():
    suite = load_suite("card_agent", PROJECT_ROOT)
    return next(t for t in suite.tasks if t.bucket == "template_event")


def pass_rate(task, prompt: str, trials: int = 300) -> float:
    return sum(decide(PROFILE, task, prompt, 0, i).passed for i in range(trials)) / trials


def test_stated_rule_raises_the_bucket_pass_rate(event_task):
    assert PROFILE.pass_probability(event_task, BASE_PROMPT) == PROFILE.base_rates["template_event"]
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + EVENT_RULE) >= 0.9
    assert pass_rate(event_task, BASE_PROMPT + "\n" + EVENT_RULE) > pass_rate(event_task, BASE_PROMPT) + 0.3


def test_irrelevant_text_changes_nothing(event_task):
    with_noise = BASE_PROMPT + "\n" + IRRELEVANT
    assert [decide(PROFILE, event_task, with_noise, 0, i).passed for i in range(100)] == \
           [decide(PROFILE, event_task, BASE_PROMPT, 0, i).passed for i in range(100)]


def test_contradicting_rule_lowers_the_pass_rate(event_task):
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + CONTRADICTION) <= 0.1


def test_concepts_split_across_sentences_do_not_state_the_rule(event_task):
    split = "Meetings matter. Use the right template. Times are important. Event cards exist."
    assert PROFILE.pass_probability(event_task, split) == PROFILE.base_rates["template_event"]


def test_a_rule_for_another_bucket_does_not_help(event_task):
    other = "Keep times, URLs, amounts and names exactly as written in the note."
    assert PROFILE.pass_probability(event_task, BASE_PROMPT + "\n" + other) == PROFILE.base_rates["template_event"]


def test_decisions_are_seeded_and_monotone(event_task):
    improved = BASE_PROMPT + "\n" + EVENT_RULE
    before = [decide(PROFILE, event_task, BASE_PROMPT, 7, i).passed for i in range(200)]
    again = [decide(PROFILE, event_task, BASE_PROMPT, 7, i).passed for i in range(200)]
    after = [decide(PROFILE, event_task, improved, 7, i).passed for i in range(200)]
    assert before == again
    assert 0 < sum(before) < 200, "trials of one task must be separate samples"
    assert all(a for b, a in zip(before, after) if b), "a stated rule never turns a pass into a fail"


@pytest.mark.parametrize("bucket", ["template_event", "template_metric", "template_task_routine",
                                    "fact_preservation", "trivial_input"])
def test_base_prompt_leaves_room_to_improve(bucket):
    assert PROFILE.rules[bucket].status(BASE_PROMPT) == "absent"


def test_failing_behaviour_per_bucket():
    suite = load_suite("card_agent", PROJECT_ROOT)
    import random

    for task in suite.tasks:
        calls = PROFILE.failing_calls(task, random.Random(1))
        reference = task.reference_solution.tool_calls[0].arguments
        if task.bucket == "trivial_input":
            assert calls == []
        elif task.bucket == "multi_fact_day":
            assert all(c.arguments["fact_id"] != reference["fact_id"] for c in calls)
        elif task.bucket == "fact_preservation":
            must = next(g.config["substrings"] for g in task.graders if g.name == "card_must_contain")
            text = str(calls[0].arguments["ui_configs"]) + calls[0].arguments["title"]
            assert not any(s.lower() in text.lower() for s in must)
        else:
            expected = next(g.config["expected_template_ids"] for g in task.graders if g.name == "card_template_choice")
            assert calls[0].arguments["ui_configs"][0]["template_id"] not in expected


# ---- negations: "rather than" / "instead of", and "not X but Y"

@pytest.mark.parametrize("sentence, status", [
    ("Rewrite times, URLs and amounts in your own words rather than keep them exactly.", "contradicted"),
    ("Paraphrase names instead of copy times, URLs and names exactly.", "contradicted"),
    ("Do not paraphrase but keep times, URLs and names exactly as written.", "stated"),
    ("Keep times, URLs and names exactly rather than paraphrasing them.", "stated"),
    ("Rather than paraphrase them, keep times, URLs and names exactly.", "stated"),
    ("Never keep times, URLs or names exactly.", "contradicted"),
    ("Keep times, URLs and names exactly as written.", "stated"),
])
def test_negation_and_contrast_on_the_card_fact_rule(sentence, status):
    assert PROFILE.rules["fact_preservation"].status(sentence) == status


@pytest.mark.parametrize("sentence, status", [
    ("Create a new file rather than append to an existing file.", "contradicted"),
    ("When an existing file covers the topic, append to it instead of creating a new file.", "stated"),
    ("Do not create a new file but append to the existing file on the topic.", "stated"),
    ("Never add to an existing file, always write a new file.", "contradicted"),
])
def test_negation_and_contrast_on_a_pkm_rule(sentence, status):
    from prompt_optimizer_agents.pkm.sim import PROFILE as PKM

    assert PKM.rules["route_into_existing_file"].status(sentence) == status


def test_one_contradicting_sentence_outweighs_a_stating_one():
    prompt = ("Keep times, URLs and names exactly as written.\n"
              "Rewrite times, URLs and amounts in your own words rather than keep them exactly.")
    assert PROFILE.rules["fact_preservation"].status(prompt) == "contradicted"


# ---- rule texts: what stand-in patchers write, scored as they claim

def profiles():
    from prompt_optimizer_agents.card.sim import PROFILE as CARD
    from prompt_optimizer_agents.pkm.sim import PROFILE as PKM

    return {"card_agent": CARD, "pkm_agent": PKM}


@pytest.mark.parametrize("agent", ["card_agent", "pkm_agent"])
def test_every_rule_text_scores_as_it_claims(agent):
    profile = profiles()[agent]
    assert set(profile.rule_texts.rules) == set(profile.rules) == set(profile.rule_texts.contradictions)
    assert len(profile.rule_texts.distractors) >= 3
    assert check_rule_texts(profile) == []


def test_the_rule_text_check_names_each_text_that_misscores():
    texts = PROFILE.rule_texts
    broken = replace(PROFILE, rule_texts=replace(
        texts, rules={**texts.rules, "template_event": texts.distractors[0]},
        contradictions={**texts.contradictions, "template_link": texts.rules["template_link"]},
        distractors=(*texts.distractors, texts.rules["fact_preservation"])))
    problems = check_rule_texts(broken)
    assert any(p.startswith("template_event: ") and "is absent, not stated" in p for p in problems)
    assert any(p.startswith("template_link: ") and "is stated, not contradicted" in p for p in problems)
    assert any(p.startswith("fact_preservation: ") and "is stated, not absent" in p for p in problems)
    assert len(problems) == 3
    assert check_rule_texts(replace(PROFILE, rule_texts=None)) == ["the profile has no rule texts"]


# ---- the effect library: harms and gains that do not follow from a line's words

def pass_probabilities(profile, suite_name: str, prompt: str) -> dict[str, float]:
    """Per bucket, the pass probability of its first task under `prompt`."""
    tasks = {}
    for task in load_suite(suite_name, PROJECT_ROOT).tasks:
        tasks.setdefault(task.bucket, task)
    return {bucket: profile.pass_probability(task, prompt) for bucket, task in tasks.items()}


def test_a_spread_effect_moves_every_bucket_it_reaches_whatever_its_wording():
    brevity = next(effect for effect in PROFILE.rule_texts.effects if effect.name == "brevity")
    before = pass_probabilities(PROFILE, "card_agent", BASE_PROMPT)
    for wording in brevity.wordings.values():
        after = pass_probabilities(PROFILE, "card_agent", BASE_PROMPT + "\n- " + wording + "\n")
        moved = {bucket: round(after[bucket] - before[bucket], 6) for bucket in before if after[bucket] != before[bucket]}
        assert moved == {"multi_fact_day": -0.2, "fact_preservation": -0.2, "template_quote": -0.2}, wording


def test_an_effect_adds_to_a_stated_rule_and_clips_at_zero():
    brevity = next(effect for effect in PROFILE.rule_texts.effects if effect.name == "brevity")
    rule, harm = PROFILE.rule_texts.rules["template_quote"], brevity.wordings["unnamed"]
    stated = pass_probabilities(PROFILE, "card_agent", f"{BASE_PROMPT}\n- {rule}\n- {harm}\n")
    assert stated["template_quote"] == pytest.approx(PROFILE.stated_rate - 0.2)
    contradiction = PROFILE.rule_texts.contradictions["template_quote"]
    worst = pass_probabilities(PROFILE, "card_agent", f"{BASE_PROMPT}\n- {contradiction}\n- {harm}\n")
    assert worst["template_quote"] == 0.0


@pytest.mark.parametrize("agent", ["card_agent", "pkm_agent"])
def test_the_effect_library_has_every_graded_size_and_wording_kind(agent):
    from optimizer.gate import named_buckets

    texts = profiles()[agent].rule_texts
    sizes = {round(value, 2) for effect in texts.effects for value in effect.change.values()}
    assert {-0.3, -0.2, -0.15, -0.1, 0.1, 0.15, 0.2, 0.3} <= sizes
    assert any(sum(value < 0 for value in effect.change.values()) >= 3 for effect in texts.effects)
    buckets = {(agent, bucket) for bucket in texts.rules}
    for effect in texts.effects:
        assert set(effect.wordings) == {"named", "unnamed", "other"}, effect.name
        named = {bucket: {b for _, b in named_buckets([text], buckets)} for bucket, text in effect.wordings.items()}
        assert named["named"] and named["named"] <= set(effect.change), effect.wordings["named"]
        assert named["unnamed"] == set(), effect.wordings["unnamed"]
        assert named["other"] and not named["other"] & set(effect.change), effect.wordings["other"]


def test_a_long_prompt_costs_every_bucket_a_little():
    texts = PROFILE.rule_texts
    before = pass_probabilities(PROFILE, "card_agent", BASE_PROMPT)
    assert len(BASE_PROMPT.split()) <= texts.free_words
    padding = " ".join(["word"] * (texts.free_words - len(BASE_PROMPT.split()) + 200))
    after = pass_probabilities(PROFILE, "card_agent", BASE_PROMPT + "\n" + padding)
    assert all(after[b] == pytest.approx(before[b] - 2 * texts.cost_per_100_words) for b in before)


def test_an_effect_on_an_unknown_bucket_is_refused(tmp_path):
    path = tmp_path / "sim_rules.json"
    path.write_text(json.dumps({"buckets": {"template_event": {"rule": "a", "contradiction": "b"}},
                                "distractors": ["x"], "effects": [
                                    {"name": "e", "change": {"nope": -0.2}, "wordings": {"unnamed": "c"}}]}))
    with pytest.raises(InputError, match=r"field 'effects.e'.*nope"):
        load_rule_texts(path)


def test_a_malformed_rule_texts_file_names_the_field(tmp_path):
    path = tmp_path / "sim_rules.json"
    path.write_text(json.dumps({"buckets": {"template_event": {"rule": "Use event."}}, "distractors": ["x"]}))
    with pytest.raises(InputError, match=r"field 'buckets.template_event.contradiction'"):
        load_rule_texts(path)


@pytest.mark.parametrize("agent", ["card_agent", "pkm_agent"])
def test_rule_texts_pass_the_pre_rollout_lint(agent):
    """A stand-in patcher's answers must reach the gate, not be stopped as copied eval data."""
    from optimizer.proposal.patch import LintIndex, lint

    texts = profiles()[agent].rule_texts
    index = LintIndex.from_suites([load_suite(agent, PROJECT_ROOT)])
    base = (PROJECT_ROOT / f"agents/prompts/{agent}.md").read_text()
    wordings = [text for effect in texts.effects for text in effect.wordings.values()]
    for text in [*texts.rules.values(), *texts.contradictions.values(), *texts.distractors, *wordings]:
        assert lint(base, text, index).passed, (text, lint(base, text, index).reason)


def test_the_benchmark_patcher_appends_the_rule_from_the_agent_data(tmp_path):
    spec = importlib.util.spec_from_file_location("sim_patcher", PROJECT_ROOT / "benchmarks/sim_patcher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "prompt.md").write_text("# Prompt\n")
    request = tmp_path / "request.md"
    request.write_text(REQUEST.format(bucket="archive_finished_project", agent="pkm_agent"))
    assert module.main(str(request), str(tmp_path), "prompt.md") == 0
    from prompt_optimizer_agents.pkm.sim import PROFILE as PKM

    assert (tmp_path / "prompt.md").read_text() == \
        f"# Prompt\n- {PKM.rule_texts.rules['archive_finished_project']}\n"


# ---- the weak mock/patcher (mock_patcher_skill)

REQUEST = ("# Prompt patch request: {agent}\n\n## Targeted buckets\n"
           "- **{agent}/{bucket}**: 3 of 4 train trials failed, mean score 0.25.\n\n"
           "## Every other bucket (must not get worse)\n- {agent}/template_link: mean 0.90, 1 of 8 train trials failed\n")
FACT_REQUEST = REQUEST.format(agent="card_agent", bucket="fact_preservation")


def test_the_weak_patcher_is_right_at_its_skill_and_otherwise_harmful_or_useless():
    texts = PROFILE.rule_texts
    right = texts.rules["fact_preservation"]
    answers = [weak_answer(FACT_REQUEST, skill=0.3, seed=5, ordinal=ordinal) for ordinal in range(1, 201)]
    kinds = Counter(answer.kind for answer in answers)
    assert set(kinds) == {"right", "harmful", "useless"}
    assert abs(kinds["right"] / 200 - 0.3) <= 4 * (0.3 * 0.7 / 200) ** 0.5, kinds
    assert abs(kinds["harmful"] / 200 - 0.175) <= 4 * (0.175 * 0.825 / 200) ** 0.5, kinds
    for answer in answers:
        if answer.kind == "right":
            assert answer.rules == [right]
        elif answer.kind == "harmful":
            assert answer.rules[0] == right and len(answer.rules) == 2
            harmed = [bucket for bucket, text in texts.contradictions.items() if text == answer.rules[1]]
            harmed += [bucket for effect in texts.effects if answer.rules[1] in effect.wordings.values()
                       for bucket, change in effect.change.items() if change < 0]
            assert harmed and "fact_preservation" not in harmed
        else:
            assert len(answer.rules) == 1 and answer.rules[0] in texts.distractors
    assert weak_answer(FACT_REQUEST, skill=0.3, seed=5, ordinal=7) == answers[6]
    other_seed = [weak_answer(FACT_REQUEST, skill=0.3, seed=6, ordinal=n) for n in range(1, 201)]
    assert other_seed != answers


def test_the_weak_patcher_answers_for_the_agent_that_owns_the_bucket():
    from prompt_optimizer_agents.pkm.sim import PROFILE as PKM

    request = REQUEST.format(agent="pkm_agent", bucket="no_overwrite")
    assert weak_answer(request, skill=1.0, seed=0, ordinal=1).rules == [PKM.rule_texts.rules["no_overwrite"]]
    unknown = REQUEST.format(agent="card_agent", bucket="no_such_bucket")
    assert weak_answer(unknown, skill=1.0, seed=0, ordinal=1).kind == "none"


def first_ordinal(kind: str, skill: float) -> int:
    return next(n for n in range(1, 500) if weak_answer(FACT_REQUEST, skill=skill, seed=0, ordinal=n).kind == kind)


@pytest.mark.parametrize("patch_format", ["edits", "rule"])
def test_a_weak_patcher_reply_goes_through_the_real_proposer(tmp_path, patch_format):
    from optimizer.proposal.llm import LLMProposer
    from optimizer.proposal.proposers import ProposalRequest

    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "prompt.md").write_text("# Card agent\n\n- Save one card per note.\n")
    git(workdir, "init", "-q", "-b", "main")
    git(workdir, "add", "-A")
    git(workdir, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "base")
    ordinal = first_ordinal("harmful", 0.3)
    expected = weak_answer(FACT_REQUEST, skill=0.3, seed=0, ordinal=ordinal).rules
    proposer = LLMProposer("mock/patcher", skill=0.3, seed=0, patch_format=patch_format, retry_attempts=1)
    proposal = proposer.propose(ProposalRequest(request=FACT_REQUEST, request_path=tmp_path / "request.md",
                                                prompt_file="prompt.md", workdir=workdir, ordinal=ordinal))
    assert proposal.error is None, proposal.error
    patched = (workdir / "prompt.md").read_text()
    assert all(rule in patched for rule in expected)
    assert PROFILE.rules["fact_preservation"].status(patched) == "stated"
    base = "# Card agent\n\n- Save one card per note.\n"
    suite = load_suite("card_agent", PROJECT_ROOT)
    assert any(PROFILE.pass_probability(task, patched) < PROFILE.pass_probability(task, base)
               for task in suite.tasks if task.bucket != "fact_preservation")
    assert proposal.rationale.startswith("A harmful answer for fact_preservation")


def test_a_weak_patcher_run_proposes_the_right_rule_for_its_target(cli, tmp_path, monkeypatch):
    repo = project_repo(tmp_path / "repo")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(repo))
    monkeypatch.setenv("OPTIMIZER_PATCHER_MODEL", "mock/patcher")
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "1.0")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    summary = json.loads((tmp_path / "run.json").read_text())
    target = re.search(r"targets: card_agent/(\w+)", err.replace("\n", " ")).group(1)
    branch = summary["proposals"][0]["branch"]
    added = [line[1:] for line in git(repo, "diff", f"main..{branch}").splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    assert added == [f"- {PROFILE.rule_texts.rules[target]}"]
    assert summary["status"] == "accepted", summary


def test_mock_patcher_refuses_both_a_script_and_a_skill(cli, tmp_path, monkeypatch):
    repo = project_repo(tmp_path / "repo")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(repo))
    monkeypatch.setenv("OPTIMIZER_PATCHER_MODEL", "mock/patcher")
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SKILL", "0.5")
    script = tmp_path / "script.json"
    script.write_text("[]")
    monkeypatch.setenv("OPTIMIZER_MOCK_PATCHER_SCRIPT", str(script))
    code, out, err = cli("run")
    assert code == 2 and "not both" in err, out + err


def test_a_rerun_of_the_same_work_at_the_same_seed_draws_the_same_answers():
    """The request names its iteration (a run id) and base commit, which differ on every run of
    the same work; the draws do not depend on them, so a benchmark repeats at its seed."""
    def request(iteration: str, commit: str) -> str:
        return (f"Iteration `{iteration}`, base commit `{commit}`, agent model `mock/sim`.\n"
                f"Trace: runs/{iteration}/trials.jsonl\n" + FACT_REQUEST)

    first = request("20261127-054100-abc123", "0123456789ab")
    again = request("20261128-010101-ffee00", "ba9876543210")
    assert [weak_answer(first, skill=0.3, seed=5, ordinal=n) for n in range(1, 41)] == \
        [weak_answer(again, skill=0.3, seed=5, ordinal=n) for n in range(1, 41)]
    other_work = first.replace("fact", "facts", 1)
    assert [weak_answer(other_work, skill=0.3, seed=5, ordinal=n) for n in range(1, 41)] != \
        [weak_answer(first, skill=0.3, seed=5, ordinal=n) for n in range(1, 41)]
