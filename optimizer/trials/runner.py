"""Running trials: each in its own temporary workspace, concurrently, recorded as it finishes.

Data flows one way: suites -> runner -> store. The runner knows agents and graders only through
the registry.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Callable

from optimizer.trials.agent_run import AgentContext
from optimizer.errors import (DeadlinePassed, InputError, ModelCallError, OptimizerError, StoreError, TrialCutShort,
                              TrialTimeout, first_line)
from optimizer.trials.judging import JudgeSettings, judging
from optimizer.ledger import BudgetExceeded
from optimizer.procfs import alive
from optimizer.models import (ModelClient, RetryPolicy, TrialContext, answer_variant, concurrency_limit,
                              litellm_module, register_trial, unregister_trial)
from optimizer.registry import get_agent, get_grader, judges_of
from optimizer.run_ids import new_run_id
from optimizer.scoring import INFRASTRUCTURE_ENDING, trial_verdict
from optimizer.settings.parts import RunnerSettings
from optimizer.store import Store
from optimizer.suites import fixture_paths
from optimizer.trials.run_spec import fingerprints, read_prompt
from optimizer.types import GraderResult, Outcome, RunResult, Suite, Task, Transcript, Trial, TrialStatus

GRACE_S = 5.0
"""How long past its deadline a stuck trial may run before the runner stops waiting for it."""
STUCK_AGENT = "TrialTimeout: the trial did not stop after its timeout_seconds"
STUCK_GRADING = "TrialTimeout: the graders did not finish within timeout_seconds of the agent's end"
STUCK_CHECK_S = 1.0
"""How often the runner looks for stuck trials."""


@dataclass(frozen=True)
class PlannedTrial:
    suite: Suite
    task: Task
    index: int
    reserve: bool = field(default=False, compare=False)
    """A base-prompt trial beyond the task's usual count (`plan`'s `lone_task_factor`): the
    comparison pairs it only when a harm check needs more of the task's pairs."""


def default_workspace_parent() -> str | None:
    """In-memory /dev/shm when available: workspaces are small and short-lived, and creating and
    removing folders there costs a fraction of a disk-backed temp folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


WORKSPACE_PREFIX = "optimizer-trial-"
"""A trial's workspace is `<prefix><pid of the process running it>-<random>` in the workspace folder."""


def remove_orphaned_workspaces(parent: str | None) -> None:
    """Remove the trial workspaces a process left when it was killed (`kill -9`, a power cut): those
    whose process is gone. In memory (/dev/shm), they would hold the machine's RAM until a reboot."""
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{WORKSPACE_PREFIX}*-*"):
        pid = folder.name.removeprefix(WORKSPACE_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def plan(suites: list[Suite], *, trials: int | None = None, task_glob: str | list[str] | None = None,
         lone_task_factor: int = 1) -> list[PlannedTrial]:
    """Trials to run: every task (or those whose id matches any of the globs) times its trials. A
    train task alone in its bucket runs `lone_task_factor` times as many (the loop's baseline: such
    a bucket's score is one task's, so the gate needs more of its pairs to see a drop); the extra
    ones are marked `reserve`."""
    globs = [task_glob] if isinstance(task_glob, str) else list(task_glob or [])
    planned = []
    for suite in suites:
        sizes = Counter(task.bucket for task in suite.tasks if task.split == "train")
        for task in suite.tasks:
            if globs and not any(fnmatch.fnmatch(task.id, glob) for glob in globs):
                continue
            usual = count = trials or suite.trials_for(task)
            if task.split == "train" and sizes[task.bucket] == 1:
                count *= lone_task_factor
            for index in range(count):
                planned.append(PlannedTrial(suite, task, index, reserve=index >= usual))
    if not planned:
        raise InputError(f"no task matches --task {' '.join(globs)!r}", field="--task",
                         fix="use a glob that matches some task id, e.g. 'card_event_*'")
    return planned


class Runner:
    """Runs planned trials and records each one in the store as soon as it finishes."""

    def __init__(self, settings: RunnerSettings, store: Store, *, project_root: Path, prompt_root: Path | None = None,
                 on_trial: Callable[[Trial], None] | None = None, in_process: bool = False):
        """`settings`: the runner's part of the settings (`Settings.runner`). `in_process` answers
        `mock/*` models without litellm and dspy (see `mock.in_process`)."""
        self.settings = settings
        models = settings.models
        self.store = store
        self.project_root = project_root
        self.prompt_root = prompt_root or project_root
        self.on_trial = on_trial
        self.workspace_parent = settings.workspace_dir or default_workspace_parent()
        retry = RetryPolicy(max_attempts=models.retry_attempts, base_delay_s=models.retry_base_delay)
        cache = store.cache if models.cache else None
        self.judge = JudgeSettings(model=models.judge_model, cache=cache, retry_attempts=models.retry_attempts,
                                   in_process=in_process)
        self.agent_model = ModelClient(models.agent_model, role="agent", cache=cache,
                                       retry=retry, seed=models.seed, temperature=models.temperature,
                                       in_process=in_process,
                                       variant=answer_variant(models.agent_model, settings.sim.sim_noise))

    def models_called(self, planned: list[PlannedTrial]) -> list[str]:
        """The agent model, and the judge model when some planned task has a judge grader."""
        if judges_of(item.task for item in planned):
            return [self.settings.models.agent_model, self.settings.models.judge_model]
        return [self.settings.models.agent_model]

    def workers(self, planned: list[PlannedTrial]) -> int:
        """Trials in flight: the setting, or fewer when a model these trials call serves fewer calls
        at once (more trials would only queue for it while their timeouts run)."""
        limits = [limit for limit in map(concurrency_limit, self.models_called(planned)) if limit]
        return min([self.settings.concurrency, *limits])

    def run(self, suites: list[Suite], planned: list[PlannedTrial], *, run_id: str | None = None,
            kind: str = "eval") -> RunResult:
        """Run `planned`; with the `run_id` of a stored run, add these trials to that run."""
        remove_orphaned_workspaces(self.workspace_parent)
        prompts = {suite.name: read_prompt(get_agent(suite.spec.agent_name), self.prompt_root) for suite in suites}
        run = RunResult(run_id=run_id or new_run_id(), started_at=datetime.now(timezone.utc),
                        settings=dict(self.settings.record),
                        fingerprints=fingerprints(suites, self.settings, self.prompt_root, planned))
        self.judge = replace(self.judge, run_id=run.run_id)

        def record(trial: Trial) -> None:
            self.store.trials.record(run.run_id, trial)
            run.trials.append(trial)
            if self.on_trial:
                self.on_trial(trial)

        def execute(item: PlannedTrial, grading_begins: Callable[[], None]) -> Trial:
            return self._execute(run.run_id, item, prompts[item.suite.name], grading_begins)

        if not self.agent_model.in_process and self.agent_model.cache is None:
            # Imported here, before the trials start, when every call will need it; with a cache
            # that may answer every call, the first call it does not answer imports it. Before the
            # run is recorded: a stop during these seconds leaves no run behind to close.
            litellm_module()
        if not (run_id and self.store.runs.exists(run_id)):
            self.store.runs.start(run, kind)
        try:
            run_pooled(planned, self.workers(planned), execute, record)
            self.store.flush()
        except BaseException as exc:
            record_ending(exc, lambda status, reason: self.store.runs.finish(run.run_id, status,
                                                                           {"stop_reason": reason}))
            raise
        run.finished_at = datetime.now(timezone.utc)
        return run

    def _execute(self, run_id: str, item: PlannedTrial, system_prompt: str,
                 grading_begins: Callable[[], None]) -> Trial:
        """One trial: the agent's run, then its graders; `grading_begins` is called between the
        two, when the agent returned in time (`run_pooled` gives the graders a clock of their own)."""
        task, suite = item.task, item.suite
        key = f"{run_id}:{suite.name}:{task.id}:{item.index}"
        entry = get_agent(suite.spec.agent_name)
        register_trial(key, TrialContext(task=task, agent_name=entry.name, trial_index=item.index,
                                         seed=self.settings.models.seed, sim_noise=self.settings.sim.sim_noise,
                                         sim_profile=entry.sim_profile, replay=entry.replay))
        workspace = Path(tempfile.mkdtemp(prefix=f"{WORKSPACE_PREFIX}{os.getpid()}-", dir=self.workspace_parent))
        begun = time.monotonic()
        deadline = begun + task.timeout_seconds
        client = self.agent_model.bind(trial_key=key, trial_index=item.index, deadline=deadline, run_id=run_id)
        try:
            for source in fixture_paths(task, self.project_root):
                shutil.copytree(source, workspace, dirs_exist_ok=True)
            context = AgentContext(task=task, workspace=workspace, system_prompt=system_prompt, model=client,
                                   trial_index=item.index, deadline=deadline)
            try:
                result = entry.run(context)
            except (BudgetExceeded, StoreError):
                raise  # the job stops; this trial is not a result
            except TrialCutShort as exc:  # before TrialTimeout: a passed deadline is both
                return _cut_short(item, exc.message, time.monotonic() - begun, client,
                                  getattr(exc, "partial_transcript", None), timed_out=isinstance(exc, DeadlinePassed))
            except TrialTimeout as exc:  # the model was failing (being retried) when time ran out
                return _errored(item, f"{INFRASTRUCTURE_ENDING}TrialTimeout: {exc}", time.monotonic() - begun,
                                client, getattr(exc, "partial_transcript", None))
            except ModelCallError as exc:
                return _errored(item, f"{type(exc).__name__}: {exc}", time.monotonic() - begun, client,
                                getattr(exc, "partial_transcript", None))
            except Exception as exc:
                detail = "".join(traceback.format_exception_only(exc)).strip()
                return _errored(item, f"agent crashed: {detail}", time.monotonic() - begun, client)
            if time.monotonic() > client.deadline:
                return _cut_short(item, f"finished only after timeout_seconds={task.timeout_seconds} had passed",
                                  time.monotonic() - begun, client, result.transcript, result.outcome, timed_out=True)
            grading_begins()
            result.transcript.usage = client.usage
            result.transcript.model = client.model
            trial = Trial(suite=suite.name, task_id=task.id, bucket=task.bucket, split=task.split,
                          index=item.index, status="failed", transcript=result.transcript,
                          outcome=result.outcome)
            asked = graded(task, self.settings.skip_graders)
            trial.grader_results = [self._grade(task, trial, index) for index in asked]
            trial.status, trial.score = trial_verdict(trial.grader_results)
            if trial.status == "errored":
                trial.error = "; ".join(f"{r.grader}: {r.rationale}" for r in trial.grader_results if r.errored)
            trial.duration_s = time.monotonic() - begun
            return trial
        finally:
            unregister_trial(key)
            shutil.rmtree(workspace, ignore_errors=True)

    def _grade(self, task: Task, trial: Trial, index: int) -> GraderResult:
        spec = task.graders[index]
        entry = get_grader(spec.name)
        try:
            config = entry.parse_config(entry.task_config(task, spec.config), path=task.path,
                                        where=f"graders[{index}]")
            with judging(self.judge):
                result = entry.func(task, trial, config)
        except (BudgetExceeded, StoreError):
            raise
        except OptimizerError as exc:
            return GraderResult(grader=spec.name, errored=True, rationale=str(exc))
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            return GraderResult(grader=spec.name, errored=True, rationale=f"grader crashed: {detail}")
        result.details.setdefault("grader_version", entry.version)
        return result


def graded(task: Task, skip: frozenset[str]) -> list[int]:
    """Indexes of the graders of `task` to ask: all but those in `skip`, or all when that is none
    (a bucket only skipped graders score stays *unjudged*, never passed ungraded)."""
    asked = [index for index, spec in enumerate(task.graders) if spec.name not in skip]
    return asked or list(range(len(task.graders)))


def early_ending(exc: BaseException) -> tuple[str, str]:
    """The status and reason of a run or iteration that `exc` ended before its end: `interrupted`
    (Ctrl-C or a signal that exits), `stopped` (a budget) or `crashed` (anything else)."""
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return "interrupted", f"{type(exc).__name__}: the process was asked to stop"
    if isinstance(exc, BudgetExceeded):
        return "stopped", f"budget: {exc.message}"
    return "crashed", f"{type(exc).__name__}: {first_line(str(exc))}"


def record_ending(exc: BaseException, write: Callable[[str, str], None]) -> None:
    """Label what `exc` ended early with `write(status, reason)`. When the store itself failed,
    the label is written if the store still takes it, and the store's first error is the one
    the caller raises."""
    status, reason = early_ending(exc)
    try:
        write(status, reason)
    except StoreError:
        if not isinstance(exc, StoreError):
            raise


def run_pooled(planned: list[PlannedTrial], workers: int,
               execute: Callable[[PlannedTrial, Callable[[], None]], Trial],
               record: Callable[[Trial], None]) -> None:
    """Run every planned trial on `workers` threads, and pass each finished trial to `record` in
    the calling thread as it finishes. `execute(item, grading_begins)` calls `grading_begins` when
    the trial's agent has returned and its graders start: the clock that gives up on a stuck trial
    starts again, so grading (slow judges on a slow machine) has the task's `timeout_seconds` of
    its own instead of what the agent left of it. A trial whose agent, or whose graders, are still
    running `GRACE_S` past that time is recorded as errored and no longer waited for."""
    clocks: dict[int, tuple[float, str]] = {}  # per trial number: when its phase began, what giving up says
    lock = threading.Lock()
    queue = iter(enumerate(planned))
    futures: dict[Future, tuple[int, PlannedTrial]] = {}
    done: SimpleQueue[Future] = SimpleQueue()  # futures land here as they finish
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trial")

    def run_one(number: int, item: PlannedTrial) -> Trial:
        def begin(message: str) -> None:
            with lock:
                clocks[number] = (time.monotonic(), message)

        begin(STUCK_AGENT)
        return execute(item, lambda: begin(STUCK_GRADING))

    def submit_next() -> None:
        for number, item in queue:
            future = pool.submit(run_one, number, item)
            futures[future] = (number, item)
            future.add_done_callback(done.put)
            return

    def stuck(now: float) -> list[tuple[Future, Trial]]:
        with lock:
            return [(future, _errored(item, clocks[number][1], now - clocks[number][0]))
                    for future, (number, item) in futures.items()
                    if not future.done() and number in clocks
                    and now - clocks[number][0] > item.task.timeout_seconds + GRACE_S]

    try:
        for _ in range(workers):
            submit_next()
        checked = time.monotonic()
        while futures:
            finished = [(future, future.result()) for future in _drain(done, timeout=STUCK_CHECK_S)
                        if future in futures]  # a trial given up as stuck may still finish later
            now = time.monotonic()
            if now - checked >= STUCK_CHECK_S:
                finished += stuck(now)
                checked = now
            for future, trial in finished:
                del futures[future]
                submit_next()
                record(trial)
    except BudgetExceeded:
        # the trials still running stop at their next reservation; wait for them, so that every
        # call they made is settled in the ledger before the stop is reported and its spend saved
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _drain(done: SimpleQueue, timeout: float) -> list[Future]:
    """The futures finished so far, waiting up to `timeout` for the first."""
    try:
        finished = [done.get(timeout=timeout)]
    except Empty:
        return []
    while True:
        try:
            finished.append(done.get_nowait())
        except Empty:
            return finished


def _errored(item: PlannedTrial, error: str, duration: float, client: ModelClient | None = None,
             partial: Transcript | None = None) -> Trial:
    """An errored trial (the setup failed it, not the agent): counted, never scored. It keeps the
    conversation so far (when the agent's loop had one) for diagnosis."""
    return _ungraded(item, "errored", None, error, duration, client, partial, Outcome())


def _cut_short(item: PlannedTrial, ending: str, duration: float, client: ModelClient,
               transcript: Transcript | None, outcome: Outcome | None = None, *, timed_out: bool = False) -> Trial:
    """A trial the agent's own run ended unfinished (`TrialCutShort`): failed with score 0, its
    graders not run, `error` saying how it ended, the conversation so far kept. One that ran out
    of time (`timed_out`) while the model was far slower than it normally is, or had completed no
    call, was cut by the infrastructure (`ModelClient.spoiled`): errored, and spoiled
    (`scoring.spoiled`), so that no score or comparison rests on it."""
    blame = client.spoiled(duration) if timed_out else None
    if blame:
        return _ungraded(item, "errored", None, f"{INFRASTRUCTURE_ENDING}{blame}; {ending}", duration, client,
                         transcript, outcome or Outcome())
    return _ungraded(item, "failed", 0.0, f"ended: {ending}", duration, client, transcript, outcome or Outcome())


def _ungraded(item: PlannedTrial, status: TrialStatus, score: float | None, error: str, duration: float,
              client: ModelClient | None, transcript: Transcript | None, outcome: Outcome) -> Trial:
    transcript = transcript or Transcript()
    if client:
        transcript.usage, transcript.model = client.usage, client.model
    return Trial(suite=item.suite.name, task_id=item.task.id, bucket=item.task.bucket, split=item.task.split,
                 index=item.index, status=status, score=score, error=error, duration_s=duration,
                 transcript=transcript, outcome=outcome)
