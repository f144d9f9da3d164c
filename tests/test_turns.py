"""Trial threads take turns: a model wait lets the next trial run; a stuck trial stops no one."""

from __future__ import annotations

import threading
import time

import pytest

from optimizer import turns


def _start(target) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_trial_waiting_on_its_model_lets_another_trial_run(monkeypatch):
    monkeypatch.setattr(turns, "TURN_WAIT_S", 60)  # no running without the turn: it must be handed over
    in_wait, answer, other_done = threading.Event(), threading.Event(), threading.Event()
    order = []

    def waiting_trial():
        with turns.trial_turn():
            with turns.waiting():
                in_wait.set()
                answer.wait(10)
            order.append("waiting trial resumed")

    def other_trial():
        with turns.trial_turn():
            order.append("other trial ran")
        other_done.set()

    first = _start(waiting_trial)
    assert in_wait.wait(10)
    second = _start(other_trial)
    assert other_done.wait(10), "the second trial did not run while the first waited on its model"
    answer.set()
    first.join(10), second.join(10)
    assert order == ["other trial ran", "waiting trial resumed"]


def test_only_one_trial_runs_between_waits():
    inside, overlaps = [0], []
    lock = threading.Lock()

    def trial():
        for _ in range(200):
            with turns.trial_turn():
                with lock:
                    inside[0] += 1
                    overlaps.append(inside[0])
                time.sleep(0.0005)  # file work releases the interpreter lock too; the turn is kept
                with lock:
                    inside[0] -= 1
                with turns.waiting():
                    pass

    threads = [_start(trial) for _ in range(4)]
    for thread in threads:
        thread.join(30)
    assert len(overlaps) == 800 and max(overlaps) == 1


def test_a_trial_stuck_in_its_turn_does_not_stop_the_others(monkeypatch):
    monkeypatch.setattr(turns, "TURN_WAIT_S", 0.05)
    stuck, release, other_done = threading.Event(), threading.Event(), threading.Event()

    def stuck_trial():  # blocks without `waiting()`, holding the turn
        with turns.trial_turn():
            stuck.set()
            release.wait(10)

    def other_trial():
        with turns.trial_turn():
            with turns.waiting():
                pass
        other_done.set()

    first = _start(stuck_trial)
    assert stuck.wait(10)
    second = _start(other_trial)
    finished = other_done.wait(10)
    release.set()
    first.join(10), second.join(10)
    assert finished, "a trial waited for the turn of a stuck one instead of running without it"


def test_turns_nest_and_are_released_on_errors():
    with pytest.raises(RuntimeError):
        with turns.trial_turn():
            with turns.trial_turn():
                with turns.waiting():
                    raise RuntimeError("model fault")
    with turns.waiting():  # outside any trial: nothing to give up
        pass
    acquired = turns._turn.acquire(timeout=1)
    assert acquired, "the turn was not released after the error"
    turns._turn.release()
