"""Trial threads take turns running Python; waiting on a model happens outside the turn.

Trials run on threads, and one interpreter lock lets only one of them run Python at a time
anyway. Without an explicit turn, every file write, mkdir or lock of a trial releases the
interpreter lock and hands it to one of the other runnable threads, which hands it back a moment
later: at 32 trials in flight that is some 230 thread switches per trial, more system time than
the trials' own work. With a turn, a trial thread keeps running until it waits on a model (or
sleeps before a retry), and only then lets the next trial run; model waits of all trials still
overlap, which is where the concurrency pays.

The turn is an optimisation, never a dependency: a thread that cannot get the turn within
`TURN_WAIT_S` (another trial is stuck in a long computation, or in a blocking call nobody marked
with `waiting()`) runs without it, as it would without this module.

Plugin agents and graders that block on something other than a model call (a subprocess, a
service over HTTP) should wrap that wait in `waiting()`, exported as `optimizer.waiting`, so
other trials run meanwhile.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

TURN_WAIT_S = 0.25
"""How long a thread waits for the turn before it runs without it."""

_turn = threading.Lock()
_held = threading.local()


def _after_fork() -> None:
    """A forked worker starts with the turn free: the thread that held it was not copied."""
    global _turn, _held
    _turn, _held = threading.Lock(), threading.local()


os.register_at_fork(after_in_child=_after_fork)


def _take() -> None:
    _held.value = _turn.acquire(timeout=TURN_WAIT_S)


def _give() -> bool:
    """Release the turn when this thread holds it; returns whether it did."""
    if getattr(_held, "value", False):
        _held.value = False
        _turn.release()
        return True
    return False


@contextmanager
def trial_turn() -> Iterator[None]:
    """Run the block (one trial) in turn with the other trial threads."""
    if getattr(_held, "value", False):  # nested: the turn is already this thread's
        yield
        return
    _take()
    try:
        yield
    finally:
        _give()


@contextmanager
def waiting() -> Iterator[None]:
    """A blocking wait (a model call, a retry's sleep): let other trials run meanwhile."""
    gave = _give()
    try:
        yield
    finally:
        if gave:
            _take()
