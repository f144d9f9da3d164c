"""Run ids: one format, made by `new_run_id` and recognised by `RUN_ID` wherever text names one."""

from __future__ import annotations

from optimizer.trials import runner
from optimizer.run_ids import RUN_ID, new_run_id
from optimizer.proposal.weak_patcher import draw


def test_a_fresh_run_id_matches_the_run_id_pattern():
    fresh = new_run_id()
    assert RUN_ID.fullmatch(fresh), fresh


def test_the_runner_makes_its_ids_with_the_one_definition():
    assert runner.new_run_id is new_run_id


def test_the_weak_patcher_draws_the_same_answer_whichever_fresh_run_the_request_names():
    def request(run_id: str, commit: str, score: str = "0.20") -> str:
        return (f"Iteration `{run_id}`, base commit `{commit}`, agent model `mock/sim`.\n"
                f"- **card_agent/time_parsing**: {score}\n")

    def first_draw(text: str) -> float:
        return draw(text, seed=3, ordinal=0, attempt=0).random()

    first, second = new_run_id(), new_run_id()
    while second == first:
        second = new_run_id()
    assert first_draw(request(first, "0123abcd")) == first_draw(request(second, "89ef4567"))
    assert first_draw(request(first, "0123abcd")) != first_draw(request(first, "0123abcd", score="0.30"))
