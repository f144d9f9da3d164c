"""Graduation: buckets that have become reliably green move into a regression suite.

A bucket of a capability suite is proposed when, in each of the last `runs` (5) completed runs
that measured it at a committed prompt (kinds `eval` and `baseline`), at least `threshold` (95%)
of its scored trials passed. `apply` copies the bucket's task files (and any `fixture_dir`
folders they use) into `suites/<agent>_regression/`, a suite of kind `regression` created on
first use, and commits those files, and only those, in a commit of its own. From then on the
loop adds the regression suite to every run for that agent: a patch that breaks a graduated task
which passed all its trials before is vetoed (gate rule 1).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from optimizer import gitops
from optimizer.errors import InputError, TaskFileError
from optimizer.files import parse_json, read_input
from optimizer.store import Store
from optimizer.types import Suite

RUN_KINDS = ("eval", "baseline")


@dataclass
class Candidate:
    suite: str
    agent: str
    bucket: str
    task_ids: list[str]
    pass_rates: list[float] = field(default_factory=list)
    """Newest first, one per run considered."""
    run_ids: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.bucket}"


def regression_suite_name(agent: str) -> str:
    return f"{agent}_regression"


def _graduated(project_root: Path, agent: str) -> set[str]:
    root = project_root / "suites" / regression_suite_name(agent) / "tasks"
    ids = set()
    for path in root.rglob("*.json") if root.is_dir() else []:
        try:
            data = parse_json(read_input(path, TaskFileError), path, TaskFileError)
        except TaskFileError:  # reported when the regression suite is loaded
            continue
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            ids.add(data["id"])
    return ids


def candidates(store: Store, suites: list[Suite], project_root: Path, *, runs: int = 5,
               threshold: float = 0.95) -> list[Candidate]:
    frame = store.runs.frame()
    frame = frame[(frame["status"] == "completed") & frame["kind"].isin(RUN_KINDS)]
    run_ids = list(frame.sort_values("started_at", ascending=False)["run_id"])
    trial_frames = {run_id: store.trials.frame(run_id) for run_id in run_ids}
    found = []
    for suite in suites:
        if suite.spec.kind != "capability":
            continue
        done = _graduated(project_root, suite.spec.agent_name)
        buckets: dict[str, list[str]] = {}
        for task in suite.tasks:
            buckets.setdefault(task.bucket, []).append(task.id)
        for bucket, task_ids in sorted(buckets.items()):
            if set(task_ids) <= done:
                continue
            candidate = Candidate(suite.name, suite.spec.agent_name, bucket, task_ids)
            for run_id in run_ids:
                trials = trial_frames[run_id]
                mine = trials[(trials["suite"] == suite.name) & (trials["bucket"] == bucket)
                              & (trials["status"] != "errored")]
                if mine.empty:
                    continue
                candidate.pass_rates.append(float((mine["status"] == "passed").mean()))
                candidate.run_ids.append(run_id)
                if len(candidate.pass_rates) == runs:
                    break
            if len(candidate.pass_rates) == runs and min(candidate.pass_rates) >= threshold:
                found.append(candidate)
    return found


def apply(chosen: list[Candidate], suites: list[Suite], project_root: Path, *, runs: int, threshold: float) -> str:
    """Write the regression suite files and commit them; returns the commit sha."""
    if not chosen:
        raise InputError("no bucket to graduate", field="--bucket",
                         fix="run `optimizer graduate` to see which buckets qualify")
    repo = gitops.open_repo(project_root)
    by_name = {suite.name: suite for suite in suites}
    written: list[Path] = []
    for agent in sorted({c.agent for c in chosen}):
        folder = project_root / "suites" / regression_suite_name(agent)
        spec = folder / "suite.json"
        if not spec.exists():
            folder.mkdir(parents=True, exist_ok=True)
            spec.write_text(json.dumps({
                "name": regression_suite_name(agent), "agent_name": agent, "kind": "regression",
                "task_pass_threshold": 1.0, "trials_per_run": 1,
                "description": f"Graduated {agent} tasks: every later prompt change must keep them passing."},
                indent=2) + "\n", encoding="utf-8")
            written.append(spec)
        for candidate in (c for c in chosen if c.agent == agent):
            suite = by_name[candidate.suite]
            for task in suite.tasks:
                if task.bucket != candidate.bucket or task.path is None:
                    continue
                relative = task.path.relative_to(suite.root / "tasks")
                target = folder / "tasks" / candidate.bucket / relative.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(task.path, target)
                written.append(target)
                if task.input.fixture_dir:
                    source = suite.root / task.input.fixture_dir
                    copy = folder / task.input.fixture_dir
                    shutil.copytree(source, copy, dirs_exist_ok=True)
                    written.extend(p for p in copy.rglob("*") if p.is_file())
    paths = [gitops.relative(repo, path) for path in written]
    buckets = ", ".join(c.key for c in chosen)
    message = (f"Graduate {buckets} into the regression suite\n\n"
               f"Each passed at least {threshold:.0%} of its trials in each of the last {runs} runs:\n" +
               "\n".join(f"- {c.key}: " + ", ".join(f"{rate:.0%}" for rate in c.pass_rates) for c in chosen) + "\n")
    repo.git.add("--", *paths)
    repo.git.commit("-m", message, "--only", "--", *paths)
    return repo.head.commit.hexsha
