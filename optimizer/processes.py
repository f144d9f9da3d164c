"""Trials spread over forked worker processes, for runs whose time goes to Python, not to waiting.

Trial threads share one interpreter lock, so when the model answers quickly (the mock models, a
plugin provider answering in process) a run is bound by the Python its trials execute: the
agent's tool loop, litellm's own work on every call, the graders. With `processes = N` the runner
forks N workers when the trials start; each runs its share of them on its own threads (the run's
concurrency divided among the workers) and sends every finished trial back. The parent keeps the
one store, response cache and cost ledger:

* finished trials and new cache entries travel to the parent, which records them as it records
  its own;
* a worker serves cache hits itself, from the entries stored before the run started (their keys
  are read before the fork) and from its own;
* every ledger reservation, settlement and release is a round trip to the parent, so a budget
  holds across workers exactly as it does across threads.

Workers are forked, not spawned: they start with litellm, the agents and the suites already
loaded (importing litellm alone takes seconds) and nothing has to be pickled on the way in. Only
models answered in this process qualify (see `optimizer.models.answered_in_process`): an HTTP
connection pool must not be shared by two processes, and a hosted model's calls are waits that
threads already overlap. Fork exists on Linux and macOS; elsewhere the runner keeps one process.

A worker that dies (a crash, a signal) takes its unfinished trials with it: the parent records
each of them as errored, naming the exit code. An exception that stops a worker (a budget
refusal, Ctrl-C) stops the run and is raised again in the parent, as it would be with threads.
A parent that dies (kill -9) leaves nothing running for long: each worker exits when its next
message finds the pipe closed, so no trial of the dead run is recorded anywhere.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import sys
import threading
import warnings
from concurrent.futures import Future
from contextlib import nullcontext
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

from optimizer import ledger as ledgers
from optimizer.errors import HarnessError
from optimizer.turns import waiting

LEDGER_CALLS = frozenset({"reserve", "settle", "release"})
"""What a worker may ask of the parent's ledger."""
JOIN_S = 5.0
"""How long the parent waits for a worker to exit before it kills it."""


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods()


class Channel:
    """A worker's end of its pipe. Any thread may send; a `call` waits for the parent's reply,
    which a reader thread hands to the caller by number."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._send_lock = threading.Lock()
        self._numbers = itertools.count()
        self._waiting: dict[int, Future] = {}
        threading.Thread(target=self._read_replies, name="worker-replies", daemon=True).start()

    def send(self, message: tuple) -> None:
        with self._send_lock:
            self._connection.send(message)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        number = next(self._numbers)
        reply: Future = Future()
        self._waiting[number] = reply
        self.send(("call", number, method, args, kwargs))
        with waiting():
            return reply.result()

    def _read_replies(self) -> None:
        while True:
            try:
                number, ok, value = self._connection.recv()
            except (EOFError, OSError):
                for reply in list(self._waiting.values()):
                    reply.set_exception(HarnessError("the parent process of this worker is gone"))
                return
            reply = self._waiting.pop(number)
            if ok:
                reply.set_result(value)
            else:
                reply.set_exception(value)


class WorkerCache:
    """The response cache as a worker sees it: hits read from the database (entries stored before
    the fork) or from this worker's own answers; new entries go to the parent to be stored."""

    def __init__(self, store: Any, channel: Channel):
        self._store = store
        self._channel = channel
        self._known = store.cache_keys()
        self._own: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        if key in self._own:
            return self._own[key]
        return self._store.cached_value(key) if key in self._known else None

    def put(self, key: str, model: str, value: dict[str, Any]) -> None:
        self._own.setdefault(key, value)
        self._channel.send(("cache", key, model, value))


class RemoteLedger:
    """The parent's ledger seen from a worker: each call is a round trip, so every reservation
    sees those of the other workers."""

    def __init__(self, channel: Channel):
        self._channel = channel

    def reserve(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call("reserve", *args, **kwargs)

    def settle(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call("settle", *args, **kwargs)

    def release(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call("release", *args, **kwargs)


@dataclass
class _Worker:
    process: Any
    connection: Connection
    unfinished: dict[tuple[str, str, int], Any] = field(default_factory=dict)
    done: bool = False


def identity(item: Any) -> tuple[str, str, int]:
    """What names a planned or finished trial within a run: suite, task id, trial index."""
    if hasattr(item, "task"):
        return item.suite.name, item.task.id, item.index
    return item.suite, item.task_id, item.index


def run_forked(planned: list, workers: int, processes: int, *, store: Any,
               run_share: Callable[[list, int, Callable[[Any], None]], None],
               become_worker: Callable[[WorkerCache], None],
               record: Callable[[Any], None], lost: Callable[[Any, str], Any]) -> None:
    """Run `planned` in `processes` forked workers with `workers` trials in flight in all.

    In each worker, `become_worker(cache)` puts the worker's view of the response cache wherever
    the run used the store's, and `run_share(share, threads, send)` runs its share, calling
    `send` with each finished trial. In the parent, `record` gets every trial as it arrives and `lost`
    builds the errored record of a trial whose worker died first.
    """
    store.flush()
    store.cache_keys()  # read before the fork, so every worker knows which entries exist
    context = multiprocessing.get_context("fork")
    children: list[_Worker] = []
    try:
        for number in range(processes):
            share = planned[number::processes]
            threads = workers // processes + (1 if number < workers % processes else 0)
            ours, theirs = context.Pipe()
            inherited = [child.connection for child in children] + [ours]
            process = context.Process(target=_work,
                                      args=(theirs, inherited, store, share, threads, run_share, become_worker),
                                      name=f"optimizer-worker-{number}", daemon=True)
            with warnings.catch_warnings():
                # Python 3.12+ warns that forking a process with threads can deadlock the child on
                # a lock another thread held. The store writer is idle after the flush above, the
                # harness's own locks are renewed in the child (os.register_at_fork), and the child
                # never touches the parent's other threads' work (litellm's logging, a progress bar).
                warnings.filterwarnings("ignore", message=".*fork", category=DeprecationWarning)
                process.start()
            theirs.close()
            children.append(_Worker(process, ours, {identity(item): item for item in share}))
        _serve(children, store, record, lost)
    finally:
        _stop(children)


def _serve(children: list[_Worker], store: Any, record: Callable, lost: Callable) -> None:
    by_connection = {child.connection: child for child in children}
    while by_connection:
        for connection in wait(list(by_connection)):
            child = by_connection[connection]
            try:
                message = connection.recv()
            except (EOFError, OSError):
                del by_connection[connection]
                _bury(child, record, lost)
                continue
            kind = message[0]
            if kind == "trial":
                trial = message[1]
                child.unfinished.pop(identity(trial), None)
                record(trial)
            elif kind == "cache":
                store.put(*message[1:])
            elif kind == "call":
                _answer(connection, *message[1:])
            elif kind == "done":
                child.done = True
            elif kind == "failed":
                raise message[1]


def _answer(connection: Connection, number: int, method: str, args: tuple, kwargs: dict) -> None:
    ledger = ledgers.current()
    try:
        if method not in LEDGER_CALLS or ledger is None:
            raise HarnessError(f"a worker asked for {method!r}, which the parent does not serve")
        reply = (number, True, getattr(ledger, method)(*args, **kwargs))
    except Exception as exc:  # the worker raises it where the call was made (BudgetExceeded)
        reply = (number, False, _portable(exc))
    connection.send(reply)


def _bury(child: _Worker, record: Callable, lost: Callable) -> None:
    """A worker's pipe closed: record what it never finished."""
    child.process.join(JOIN_S)
    if child.done and not child.unfinished:
        return
    code = child.process.exitcode
    reason = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    for item in child.unfinished.values():
        record(lost(item, f"the worker process running this trial ended ({reason}) before the trial finished"))
    child.unfinished.clear()


def _stop(children: list[_Worker]) -> None:
    for child in children:
        if child.process.is_alive():
            child.process.terminate()
    for child in children:
        child.process.join(JOIN_S)
        if child.process.is_alive():
            child.process.kill()
            child.process.join()
        child.connection.close()


def _work(connection: Connection, inherited: list[Connection], store: Any, share: list, threads: int,
          run_share: Callable, become_worker: Callable) -> None:
    """A worker's life: adopt the parent's cache and ledger by proxy, run the share, report, exit.

    The parent's ends of the pipes forked into this worker are closed first: while any process
    but the parent holds them, a worker would not notice that its parent is gone."""
    for end in inherited:
        end.close()
    code = 0
    channel = Channel(connection)
    try:
        store.engine.dispose(close=False)  # the parent's database connections stay the parent's
        become_worker(WorkerCache(store, channel))
        remote = RemoteLedger(channel) if ledgers.current() is not None else None
        with ledgers.charging(remote) if remote else nullcontext():
            run_share(share, threads, lambda trial: channel.send(("trial", trial)))
        channel.send(("done",))
    except BaseException as exc:  # noqa: BLE001 - whatever stops a worker stops the run
        code = 1
        try:
            channel.send(("failed", _portable(exc)))
        except Exception:  # the parent is gone: nobody is left to tell
            pass
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a HarnessError that names it."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return HarnessError(f"{type(exc).__name__}: {exc}")
