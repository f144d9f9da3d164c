"""mock/sim's noise modes: `paired` shares each trial's draw across prompts, `independent` gives
a changed prompt draws of its own, and the response cache never mixes the two."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from prompt_optimizer_agents.card.sim import PROFILE
from optimizer.models import ModelClient, answer_variant
from optimizer.models.client import cache_key
from optimizer.trials.sim import decide
from optimizer.suites import load_suite
from tests.conftest import PROJECT_ROOT
from tests.helpers import event_task, write_suite

BASE_PROMPT = (PROJECT_ROOT / "agents/prompts/card_agent.md").read_text()
EVENT_RULE = "When a note names a meeting or appointment with a concrete future time, use event."
IRRELEVANT = "Write titles in sentence case and keep them under sixty characters."


@pytest.fixture(scope="module")
def task():
    suite = load_suite("card_agent", PROJECT_ROOT)
    return next(t for t in suite.tasks if t.bucket == "template_event")


def outcomes(task, prompt: str, noise: str, trials: int = 200, seed: int = 3) -> list[bool]:
    return [decide(PROFILE, task, prompt, seed, index, noise).passed for index in range(trials)]


def within_binomial(observed: float, p: float, n: int, sds: float = 4.0) -> bool:
    return abs(observed - p) <= sds * math.sqrt(p * (1 - p) / n)


def test_independent_draws_reproduce_for_the_same_prompt(task):
    first = outcomes(task, BASE_PROMPT, "independent")
    assert first == outcomes(task, BASE_PROMPT, "independent")
    assert 0 < sum(first) < len(first)
    calls = [decide(PROFILE, task, BASE_PROMPT, 3, index, "independent").calls for index in range(20)]
    assert calls == [decide(PROFILE, task, BASE_PROMPT, 3, index, "independent").calls for index in range(20)]


def test_independent_draws_of_two_prompts_with_the_same_rule_status_agree_only_by_chance(task):
    noisy = BASE_PROMPT + "\n" + IRRELEVANT
    assert PROFILE.rules["template_event"].status(noisy) == PROFILE.rules["template_event"].status(BASE_PROMPT)
    p = PROFILE.pass_probability(task, BASE_PROMPT)
    assert outcomes(task, noisy, "paired") == outcomes(task, BASE_PROMPT, "paired")
    one, other = outcomes(task, BASE_PROMPT, "independent"), outcomes(task, noisy, "independent")
    agreement = sum(a == b for a, b in zip(one, other)) / len(one)
    expected = p ** 2 + (1 - p) ** 2
    assert within_binomial(agreement, expected, len(one)), (agreement, expected)
    assert agreement < 0.8


@pytest.mark.parametrize("prompt", [BASE_PROMPT, BASE_PROMPT + "\n" + EVENT_RULE], ids=["absent", "stated"])
def test_independent_pass_frequency_matches_the_rate(task, prompt):
    p = PROFILE.pass_probability(task, prompt)
    passed = outcomes(task, prompt, "independent", trials=2000)
    assert within_binomial(sum(passed) / len(passed), p, len(passed)), (sum(passed) / len(passed), p)


def test_independent_draws_can_turn_a_pass_into_a_fail_after_a_stated_rule(task):
    """Unlike paired draws, a better prompt is a fresh sample: some passes of the old prompt fail."""
    before = outcomes(task, BASE_PROMPT, "independent", trials=400)
    after = outcomes(task, BASE_PROMPT + "\n" + EVENT_RULE, "independent", trials=400)
    assert any(b and not a for b, a in zip(before, after))
    assert sum(after) > sum(before)


def test_an_unknown_noise_mode_is_refused(task):
    with pytest.raises(ValueError, match="unknown sim noise mode 'fresh'"):
        decide(PROFILE, task, BASE_PROMPT, 0, 0, "fresh")


def test_the_simulator_is_known_by_its_parsed_model_name():
    """One test of what `mock/sim` is, shared by `optimizer noise`, `eval`'s profile check and the
    cache's variant, instead of each matching the model string its own way."""
    from optimizer.models import is_simulator

    assert is_simulator("mock/sim") and is_simulator("mock/sim@20ms")
    assert not any(map(is_simulator, ("mock/oracle", "mock/simx", "mock/sim@fast", "openai/mock/sim", "local/sim")))


def test_the_cache_key_keeps_the_noise_modes_apart_only_for_mock_sim():
    messages = [{"role": "user", "content": "hi"}]
    paired, independent = answer_variant("mock/sim", "paired"), answer_variant("mock/sim@20ms", "independent")
    assert cache_key("mock/sim", messages, None, {"seed": 0}, 3, paired) != \
           cache_key("mock/sim", messages, None, {"seed": 0}, 3, independent)
    assert answer_variant("openai/gpt-4o-mini", "independent").startswith("litellm==")  # the parser's version
    assert answer_variant("mock/oracle", "independent") is None
    # without a variant the key is what it always was
    assert cache_key("openai/gpt-4o-mini", messages, None, {"seed": 0}, 3) == \
           "72f0fd0c3e0875ce361e4bb362d5cb55c65b73869efe31f9625a1c05e09606d9"
    assert ModelClient("openai/gpt-4o-mini").variant is None


def test_an_independent_run_is_never_served_a_paired_answer_from_the_cache(cli, isolated, tmp_path, monkeypatch):
    """Each run's trials made exactly the calls its own mode decides (a cached answer of the other
    mode would show as the other mode's calls)."""
    suite = write_suite(tmp_path / "suite", [event_task()])
    task = load_suite(str(suite), PROJECT_ROOT).tasks[0]

    def decided(mode: str) -> list[list]:
        return [[[call.name, call.arguments] for call in decide(PROFILE, task, BASE_PROMPT, 0, index, mode).calls]
                for index in range(24)]

    assert decided("paired") != decided("independent")
    hits = []
    for mode in ("paired", "independent", "independent"):
        monkeypatch.setenv("OPTIMIZER_SIM_NOISE", mode)
        code, out, err = cli("eval", "--suite", str(suite), "--trials", "24")
        assert code in (0, 1), out + err
        with sqlite3.connect(isolated / "optimizer.db") as db:
            run_id = db.execute("select run_id from runs order by started_at desc limit 1").fetchone()[0]
            rows = db.execute("select transcript_json, cache_hits from trials where run_id = ? "
                              "order by trial_index", (run_id,)).fetchall()
        made = [[[call["name"], call["arguments"]] for call in json.loads(transcript)["tool_calls"]]
                for transcript, _ in rows]
        assert made == decided(mode), mode
        hits.append(sum(count for _, count in rows))
    assert hits[1] == 0, "the independent run was served answers cached by the paired run"
    assert hits[2] > 0, "an unchanged independent rerun is served from the cache"
