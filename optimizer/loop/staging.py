"""Where the loop's trials run: prompts exported from a commit, runs that a resumed job takes up
where it was killed, an iteration's baseline, fresh base and screening trials (`Stage`), and
the comparison's two sides (`optimizer.comparison.compare`) in the loop."""

from __future__ import annotations

import functools
import math
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from optimizer import gitops
from optimizer.trials.evaluate import finish
from optimizer.files import write_text
from optimizer.loop.records import IterationResult, LoopContext
from optimizer.registry import get_agent
from optimizer.trials.run_spec import fingerprints
from optimizer.trials.runner import PlannedTrial, Runner, new_run_id
from optimizer.proposal.screening import SCREEN_INDEX, text_sha
from optimizer.settings.parts import RunnerSettings
from optimizer.store.runs import UNFINISHED, task_without_count
from optimizer.types import RunResult, Suite, Trial


def export_prompts(repo, commit: str, prompt_files: dict[str, str], folder: Path) -> Path:
    """Write every prompt file as `commit` holds it under `folder`, at its path from the project
    root, for the runner's `prompt_root`: trials read exactly what was committed, never a working
    tree (the user's, or a proposer's clone with whatever it left there).

    `prompt_files` maps each prompt's path from the project root to its path in the repository."""
    for project_path, repo_path in prompt_files.items():
        target = folder / project_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(gitops.read_at(repo, commit, repo_path), encoding="utf-8")
    return folder


def called_model(trials: list[Trial]) -> int:
    """Trials that made at least one model call (not served wholly from the response cache)."""
    return sum(1 for trial in trials if trial.transcript.usage.calls > 0)


def run_trials(ctx: LoopContext, settings: RunnerSettings, suites, planned, prompt_root: Path, *, kind: str,
               label: str, run_id: str | None = None) -> RunResult:
    """Run `planned` as (part of) a run. Trials already recorded are kept, not redone: those of
    `run_id` when it exists, or of an unfinished run of this kind with the same fingerprints (a
    job killed mid-run and resumed), whose id is then adopted (never one another live job runs)."""
    store = ctx.store
    exists = run_id is not None and store.runs.exists(run_id)
    if not exists:
        unfinished = store.runs.adopt(fingerprints(suites, settings, prompt_root, planned), kind)
        if unfinished:
            run_id, exists = unfinished, True
    kept: list[Trial] = []
    if exists:
        done = store.trials.recorded(run_id)
        if done:
            wanted = {(item.suite.name, item.task.id, item.index) for item in planned}
            kept = [t for t in store.trials.load(run_id) if (t.suite, t.task_id, t.index) in wanted]
            planned = [item for item in planned if (item.suite.name, item.task.id, item.index) not in done]
            if kept:
                ctx.log(f"{label}: {len(kept)} trials already recorded in run {run_id} are kept")
    runner = Runner(settings, store, project_root=ctx.project_root, prompt_root=prompt_root)
    if not planned:
        run = RunResult(run_id=run_id, started_at=datetime.now(timezone.utc), settings=dict(settings.record))
    elif ctx.make_progress is None:
        runner.on_trial = ctx.on_trial
        run = runner.run(suites, planned, run_id=run_id, kind=kind)
    else:
        with ctx.make_progress(len(planned), label) as progress:
            runner.on_trial = progress.update
            run = runner.run(suites, planned, run_id=run_id, kind=kind)
    run.trials[:0] = kept
    return run


class Stage:
    """Where an iteration's trials run, counted in its `result`: the baseline (or a reused one),
    the base prompt's fresh trials shared by every candidate, screening trials, and any run."""

    def __init__(self, ctx: LoopContext, settings: RunnerSettings, suites: list[Suite], planned: list[PlannedTrial],
                 result: IterationResult, base_root: Path):
        self.ctx, self.settings, self.suites, self.planned = ctx, settings, suites, planned
        self.result, self.base_root, self.store = result, base_root, ctx.store
        self.fresh_base: dict[tuple[str, str, int], Trial] = {}
        """Base-prompt trials at fresh indexes, shared by every candidate of the iteration."""
        self.confirm_run_id: str | None = None
        self.sources: set[str] = set()
        """The runs whose recorded trials the iteration took in (`recorded`, `base_pool`)."""
        self.screen_runs: dict[str, str] = {}
        """Per prompt (text sha), the run its screening trials are recorded in."""

    @functools.cached_property
    def spec(self) -> dict:
        """The baseline's run spec (`fingerprints`), computed once: the baseline and the base pool
        are both found by it."""
        return fingerprints(self.suites, self.settings, self.base_root, self.planned)

    def run(self, planned: list[PlannedTrial], prompt_root: Path, *, kind: str, label: str,
            run_id: str | None = None) -> RunResult:
        """Run `planned` in `run_id`, or in a run of the same kind and spec that the iteration this
        one resumes (`interrupted`) finished before it was killed, keeping its trials (an
        unfinished one is adopted by `run_trials`)."""
        if self.interrupted and not (run_id and self.store.runs.exists(run_id)):
            spec = fingerprints(self.suites, self.settings, prompt_root, planned)
            left = self.store.runs.left_by(self.interrupted, spec, kind)
            if left and self.store.runs.get(left)["status"] not in UNFINISHED:
                run_id = left
        return run_trials(self.ctx, self.settings, self.suites, planned, prompt_root, kind=kind, label=label,
                          run_id=run_id)

    def baseline(self) -> list[Trial]:
        """The base prompts' trials at the planned indexes: a completed run with the same spec, or
        a new baseline run that takes in every recorded trial of the same prompts at those
        indexes (`recorded`: after an accept, the accepted candidate's gate ran most of them)
        and runs the rest."""
        result = self.result
        reuse = self.store.runs.find_reusable(self.spec, len(self.planned))
        if reuse:
            self.ctx.log(f"baseline: reusing run {reuse} (the same run spec: commit, code, prompts, tasks, fixtures, "
                         f"graders, models, packages)")
            result.baseline_run_id, result.baseline_reused = reuse, True
            return self.store.trials.load(reuse)
        recorded = self.recorded
        wanted = [key for item in self.planned if (key := (item.suite.name, item.task.id, item.index)) in recorded]
        run_id = self.store.runs.adopt(self.spec, "baseline")
        if wanted and run_id is None:
            run_id = new_run_id()
            self.store.runs.start(RunResult(run_id=run_id, started_at=datetime.now(timezone.utc),
                                            settings=dict(self.settings.record), fingerprints=self.spec), "baseline")
        if wanted:
            done = self.store.trials.recorded(run_id)
            for key in wanted:
                if key not in done:
                    self.store.trials.record(run_id, recorded[key])
            self.store.flush()
        ran = len(self.planned) - len(wanted)
        self.ctx.log(f"baseline: {ran} trials at {result.base.commit[:12]}"
                     + (f" ({len(wanted)} more recorded with the same prompts, taken in)" if wanted else ""))
        run = self.run(self.planned, self.base_root, kind="baseline", label="baseline", run_id=run_id)
        finish(run, self.store)
        result.baseline_run_id = run.run_id
        taken = set(wanted)
        result.rollouts += ran
        result.model_rollouts += called_model([t for t in run.trials if (t.suite, t.task_id, t.index) not in taken])
        return run.trials

    @functools.cached_property
    def interrupted(self) -> list[dict]:
        """The iterations on this base commit interrupted since its last verdict: this one runs in
        their place, so the screening, base and candidate runs they finished are taken in, not
        run again (a night killed inside its gate and resumed runs the trials of the
        uninterrupted night, no more)."""
        return self.store.iterations.interrupted_since_verdict(self.result.base.commit)

    @functools.cached_property
    def recorded(self) -> dict[tuple[str, str, int], Trial]:
        """Every recorded trial, by (suite, task, index), of an agent with its base prompt, the
        same code, graders, models and packages, of a task whose spec is the baseline's, from runs
        finished before the first iteration on this base commit started (an accepted candidate's
        gate and screening trials: its prompt is now the base prompt; earlier baselines of an
        agent whose prompt did not change). Errored trials are left out."""
        spec = self.spec
        tasks = spec.get("tasks") or {}
        decided = self.store.iterations.first_start(self.result.base.commit)
        if decided is None:
            return {}
        suites_of: dict[str, set[str]] = {}
        for suite in self.suites:
            suites_of.setdefault(suite.spec.agent_name, set()).add(suite.name)
        found: dict[tuple[str, str, int], Trial] = {}
        for run_id, other, agents in self.store.runs.of_agent_setup(spec, suites_of, finished_by=decided):
            self.sources.add(run_id)
            names = set().union(*(suites_of[agent] for agent in agents))
            other_tasks = other.get("tasks") or {}
            for trial in self.store.trials.load(run_id):
                key = f"{trial.suite}/{trial.task_id}"
                if trial.suite not in names or trial.status == "errored" or not _same_task(
                        tasks.get(key), other_tasks.get(key)):
                    continue
                found.setdefault((trial.suite, trial.task_id, trial.index), trial)
        return found

    def evidence(self, baseline: list[Trial]) -> list[Trial]:
        """The baseline's trials and every other recorded trial of the base prompts (`recorded`):
        what target selection ranks headroom on. A bucket a patch has just fixed has dozens of
        fresh trials there and ranks by them, not by its baseline's two. Trials at the baseline's
        indexes come from the baseline.

        Only runs finished before the first iteration on this base commit started count: every
        iteration on one base ranks on the same trials, so it keeps the targets (and continues
        their search pool) until they are set aside or skipped, and a job killed and resumed
        ranks as an uninterrupted one would."""
        found = {(t.suite, t.task_id, t.index): t for t in baseline}
        for key, trial in self.recorded.items():
            found.setdefault(key, trial)
        return list(found.values())

    def base_pool(self) -> int:
        """Take in the base prompt's trials at fresh indexes that earlier iterations on the same
        base and run spec ran (a nightly's proposals on one base prompt), so each is run once per
        base prompt, not once per iteration. Only iterations that reached a verdict count: the
        runs of one that was interrupted are taken up again, and counted, by the iteration that
        runs in its place. Indexes the baseline holds and errored trials are left out. Returns
        how many were taken."""
        decided = self.store.iterations.last_verdict(self.result.base.commit)
        if decided is None:
            return 0
        counts: dict[tuple[str, str], int] = {}
        for item in self.planned:
            key = (item.suite.name, item.task.id)
            counts[key] = max(counts.get(key, 0), item.index + 1)
        taken = 0
        for run_id in self.store.runs.of_spec(self.spec, "confirm", started_before=decided):
            self.sources.add(run_id)
            if run_id not in self.result.base_runs:
                self.result.base_runs.append(run_id)
            for trial in self.store.trials.load(run_id):
                key = (trial.suite, trial.task_id, trial.index)
                if (trial.status != "errored" and trial.index >= counts.get(key[:2], math.inf)
                        and key not in self.fresh_base):
                    self.fresh_base[key] = trial
                    taken += 1
        return taken

    def base_trials(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Base-prompt trials at fresh indexes: run once per base prompt (see `base_pool`),
        recorded in one run per iteration, and shared by every candidate."""
        missing = [item for item in planned if (item.suite.name, item.task.id, item.index) not in self.fresh_base]
        if missing:
            self.confirm_run_id = self.confirm_run_id or new_run_id()
            run = self.run(missing, self.base_root, kind="confirm", label=f"{label} (base prompt)",
                           run_id=self.confirm_run_id)
            self.confirm_run_id = run.run_id  # a resumed job adopts the unfinished run it left
            if run.run_id not in self.result.base_runs:
                self.result.base_runs.insert(0, run.run_id)
            self.result.rollouts += len(missing)
            self.result.model_rollouts += called_model(run.trials)
            for trial in run.trials:
                self.fresh_base[(trial.suite, trial.task_id, trial.index)] = trial
            # the run's summary covers every fresh base trial so far, not this batch alone
            finish(run.model_copy(update={"trials": list(self.fresh_base.values())}), self.store)
        return [self.fresh_base[(item.suite.name, item.task.id, item.index)] for item in planned]

    def screen(self, planned: list[PlannedTrial], agent: str, prompt: str, label: str) -> list[Trial]:
        """Screening trials of `agent` with `prompt`, through the runner, in one run per prompt."""
        sha = text_sha(prompt)
        with tempfile.TemporaryDirectory(prefix="optimizer-screen-") as folder:
            root = Path(folder)
            shutil.copytree(self.base_root, root, dirs_exist_ok=True)
            write_text(root / get_agent(agent).prompt_file, prompt)
            run = self.run(planned, root, kind="screen", label=label, run_id=self.screen_runs.get(sha))
        self.screen_runs[sha] = run.run_id
        if self.store.runs.exists(run.run_id):
            finish(run, self.store)
        count, calls = len(planned), called_model(run.trials)
        self.result.rollouts += count
        self.result.model_rollouts += calls
        self.result.screen_rollouts += count
        return run.trials


def unseen_from(trials: list[Trial], *, low: int = 0, high: float = math.inf) -> dict[tuple[str, str], int]:
    """Per (suite, task), the index after the highest of `trials` in [`low`, `high`): where
    fresh trials of that range start, so a fresh trial is never a recorded one served again
    (the response cache answers a prompt, task and index it has seen with the same output)."""
    out: dict[tuple[str, str], int] = {}
    for trial in trials:
        if low <= trial.index < high:
            key = (trial.suite, trial.task_id)
            out[key] = max(out.get(key, low), trial.index + 1)
    return out


def _same_task(one: dict | None, other: dict | None) -> bool:
    """Two task specs (file and fixtures) alike, whatever trials each run planned."""
    return one is not None and other is not None and task_without_count(one) == task_without_count(other)


class LoopSides:
    """`compare`'s two prompts in the loop: base trials from the iteration's shared fresh runs,
    candidate trials recorded in the proposal's run."""

    def __init__(self, stage: Stage, prompt_root: Path, run_id: str):
        self.stage, self.prompt_root, self.run_id = stage, prompt_root, run_id
        self.trials: list[Trial] = []
        self.candidate_count = self.candidate_model_calls = self.base_count = self.base_model_calls = 0

    def base(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        result = self.stage.result
        rollouts, calls = result.rollouts, result.model_rollouts
        trials = self.stage.base_trials(planned, label)
        self.base_count += result.rollouts - rollouts
        self.base_model_calls += result.model_rollouts - calls
        return trials

    def candidate(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        run = self.stage.run(planned, self.prompt_root, kind="candidate", label=f"{label} (candidate)",
                             run_id=self.run_id)
        self.run_id = run.run_id  # a resumed job adopts the unfinished run it left: one run, one id
        self.trials += run.trials
        self.candidate_count += len(planned)
        self.candidate_model_calls += called_model(run.trials)
        return run.trials

    def ran(self) -> int:
        return self.base_count + self.candidate_count

    @property
    def model_calls(self) -> int:
        return self.base_model_calls + self.candidate_model_calls

    def result(self, settings: RunnerSettings) -> RunResult:
        return RunResult(run_id=self.run_id, started_at=datetime.now(timezone.utc), settings=dict(settings.record),
                         trials=list(self.trials))
