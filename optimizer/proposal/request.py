"""From a baseline run to a patch request: pick the targets, export failures, render `request.md`.

Selection: among the capability suites, the agent whose train split has the most failing
trials; within it the buckets with the most failing train tasks, those whose failures a grader
names as a confusion counted twice (`optimizer.proposal.targets`; ties: lower mean score).
Only train-split trials are ever exported; holdout tasks do not appear in a request at all.

The request is capped at a token budget (estimated as characters / 4). Fixed parts (constraints,
targets, the bucket status lines, the prompt, the manual) always go in; failures fill what is
left, one per task (that task's worst trial), the most informative first: targeted bucket, lowest
score, most failing trials.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from optimizer.proposal.contrast import pieces as contrast_pieces
from optimizer.proposal.diffs import added_lines
from optimizer.proposal.contrast import render_contrast, same_decision
from optimizer.proposal.manual import shipped_manual
from optimizer.scoring import trial_value
from optimizer.proposal.targets import bucket_confusions, changeable, confused_tasks, top_confusions
from optimizer.types import Suite, Trial

TEMPLATES = Path(__file__).parent.parent / "templates"
TRACE_CHARS = 1500
WORKSPACE_CHARS = 1500
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Target:
    suite: str
    bucket: str
    failed: int
    trials: int
    mean_score: float
    confusions: tuple[tuple[str, int], ...] = ()
    """The confusions its graders named most often, as (text, failed trials) (`optimizer.proposal.targets`)."""


@dataclass
class Selection:
    agent: str
    suite_names: list[str]
    targets: list[Target]
    others: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Manual:
    text: str
    sha256: str
    files: tuple[str, ...]


def load_manual(project_root: Path, agent: str) -> Manual:
    """`general.md` plus the agent's own section, as sent; hashed as sent. From the project's
    `prompt_manual/`, or, in a project without one, from the manual that ships with the optimizer."""
    folder, shown = project_root / "prompt_manual", "prompt_manual"
    if not folder.is_dir():  # recorded as the optimizer's own, so a reviewer sees which was sent
        folder, shown = shipped_manual(), "optimizer/prompt_manual"
    parts, names = [], []
    for name in ("general.md", f"{agent}.md"):
        path = folder / name
        if path.is_file():
            parts.append(path.read_text(encoding="utf-8").strip())
            names.append(f"{shown}/{name}")
    text = "\n\n".join(parts)
    return Manual(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), files=tuple(names))


def _trial_value(trial: Trial) -> float:
    return trial_value(trial.score, trial.status)


def bucket_status(trials: list[Trial], suite_names: set[str]) -> list[dict[str, Any]]:
    """Per (suite, bucket) of the train split: trials, failed, mean score, and `failing`: the
    bucket's tasks expected to fail in one round of the suite (each task's share of failed
    trials, summed), which does not grow with the trials a task happens to have run."""
    groups: dict[tuple[str, str], list[Trial]] = {}
    for trial in trials:
        if trial.suite in suite_names and trial.split != "holdout" and trial.status != "errored":
            groups.setdefault((trial.suite, trial.bucket), []).append(trial)
    rows = []
    for (suite, bucket), group in sorted(groups.items()):
        by_task: dict[str, list[Trial]] = {}
        for trial in group:
            by_task.setdefault(trial.task_id, []).append(trial)
        failing = sum(sum(t.status == "failed" for t in runs) / len(runs) for runs in by_task.values())
        rows.append({"suite": suite, "bucket": bucket, "trials": len(group),
                     "failed": sum(trial.status == "failed" for trial in group), "failing": failing,
                     "confused": confused_tasks(group),
                     "mean_score": sum(map(_trial_value, group)) / len(group)})
    return rows


def select_targets(trials: list[Trial], suites: list[Suite], *, max_targets: int = 1,
                   agent: str | None = None, skip: set[tuple[str, str]] | None = None,
                   prefer_named: bool = False) -> Selection | None:
    """The agent and buckets to work on, or None when no train trial failed (buckets in `skip`,
    as (suite, bucket), are not targeted; they still count as failing in the status list).

    Buckets are ranked by what a prompt can change: the tasks expected to fail per round
    (`failing` in `bucket_status`), those failing with a confusion a grader names counted twice
    (`optimizer.proposal.targets.changeable`; only the failing tasks when not `prefer_named`), then the
    lower mean score. A raw count of failed trials
    would favour a task alone in its bucket, which runs several times the trials of the others;
    the agent is the one with the most failing tasks."""
    skip = skip or set()
    capability = [suite for suite in suites if suite.spec.kind == "capability"]
    by_agent: dict[str, list[str]] = {}
    for suite in capability:
        by_agent.setdefault(suite.spec.agent_name, []).append(suite.name)
    best: Selection | None = None
    best_key: tuple | None = None
    for agent_name, names in sorted(by_agent.items()):
        if agent and agent_name != agent:
            continue
        rows = bucket_status(trials, set(names))
        failing = sorted((row for row in rows if row["failed"] and (row["suite"], row["bucket"]) not in skip),
                         key=lambda r: (-changeable(r, r["confused"] if prefer_named else 0.0), r["mean_score"],
                                        r["suite"], r["bucket"]))
        if not failing:
            continue
        key = (-sum(row["failing"] for row in failing), agent_name)
        if best_key is None or key < best_key:
            named = bucket_confusions(trials)
            targets = [Target(row["suite"], row["bucket"], row["failed"], row["trials"], row["mean_score"],
                              top_confusions(named.get((row["suite"], row["bucket"]))))
                       for row in failing[:max_targets]]
            chosen = {(t.suite, t.bucket) for t in targets}
            others = [row for row in rows if (row["suite"], row["bucket"]) not in chosen]
            best, best_key = Selection(agent_name, names, targets, others), key
    return best


def exhausted_buckets(rejected: list[dict[str, Any]], base_commit: str, patience: int) -> set[tuple[str, str]]:
    """Buckets with at least `patience` rejected proposals made against this base commit (rows
    of `store.proposals.rejected`, and of `store.iterations.rejected_unproposed`, each one)."""
    counts: dict[str, int] = {}
    for row in rejected:
        if row["base_commit"] == base_commit:
            for target in row["targets"] or []:
                counts[target] = counts.get(target, 0) + 1
    return {tuple(target.split("/", 1)) for target, count in counts.items() if count >= patience}


def rejected_ideas(rejected: list[dict[str, Any]], targets: set[str], limit: int = 5) -> list[str]:
    """One line per earlier rejected proposal for any of these buckets (newest last): what it
    tried and why it did not help, for the "already tried" section of the request.

    Proposals stopped by the pre-rollout checks are left out: they were never measured, the
    request already states those rules, and quoting a hard-coded patch would put the evaluation
    data it copied into the next request."""
    ideas = []
    for row in rejected:
        if not targets & set(row["targets"] or []) or row["status"] == "rejected_check":
            continue
        added = added_lines(row["diff"] or "")
        change = "; ".join(_trim(line, 160) for line in added[:2]) or "no textual change"
        rationale = _trim(" ".join((row["rationale"] or "").split()), 240)
        ideas.append(f"Added: \"{change}\"" + (f" (rationale: {rationale})" if rationale else "") +
                     f". Outcome: {_trim(row['reason'] or row['status'], 240)}")
    return ideas[-limit:]


def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 40] + f"\n... [{len(text) - limit + 40} chars trimmed]"


def _trace(trial: Trial) -> str:
    lines = []
    for call in trial.transcript.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        status = "error" if call.is_error else "ok"
        lines.append(f"-> {call.name}({_trim(arguments, 600)})\n<- {status}: {_trim(call.result, 300)}")
    final = next((m.get("content") for m in reversed(trial.transcript.messages)
                  if m.get("role") == "assistant" and m.get("content")), None)
    if final:
        lines.append(f"final reply: {_trim(str(final), 300)}")
    if not lines:
        lines.append("(the agent made no tool call)")
    return _trim("\n".join(lines), TRACE_CHARS)


def _workspace(trial: Trial) -> str:
    state = trial.outcome.environment_state
    if not state:
        return ""
    if isinstance(state.get("diff"), str) and state["diff"]:
        return _trim(state["diff"], WORKSPACE_CHARS)
    # A file's text (more than one line) reads better as itself than as an escaped JSON string.
    texts = {key: value for key, value in state.items() if isinstance(value, str) and "\n" in value.strip()}
    fields = {key: value for key, value in state.items() if key not in texts}
    parts = [json.dumps(fields, ensure_ascii=False, indent=1, default=str)]
    parts += [f"{key}:\n{value.rstrip()}" for key, value in texts.items()]
    return _trim("\n".join(parts), WORKSPACE_CHARS)


def request_failures(trials: list[Trial], suites: list[Suite], selection: Selection,
                     patch_format: str) -> list[dict[str, Any]]:
    """The failure records a request shows: the targeted buckets' (`failure_records`), or, for a
    decision-scoped rule (`patch_format = "decision"`), every train bucket's that made the
    target's decision wrong the same way (`optimizer.proposal.contrast.same_decision`)."""
    if patch_format != "decision":
        return failure_records(trials, suites, selection)
    return same_decision(failure_records(trials, suites, selection, every_bucket=True), selection)


def failure_records(trials: list[Trial], suites: list[Suite], selection: Selection, *,
                    every_bucket: bool = False) -> list[dict[str, Any]]:
    """One record per failing train task of the targeted buckets (of every bucket of the
    selection's suites with `every_bucket`), most informative first."""
    tasks = {(suite.name, task.id): task for suite in suites for task in suite.tasks}
    targeted = {(t.suite, t.bucket) for t in selection.targets}

    def wanted(trial: Trial) -> bool:
        return trial.suite in selection.suite_names if every_bucket else (trial.suite, trial.bucket) in targeted

    per_task: dict[tuple[str, str], list[Trial]] = {}
    for trial in trials:
        if wanted(trial) and trial.split != "holdout" and trial.status != "errored":
            per_task.setdefault((trial.suite, trial.task_id), []).append(trial)
    records = []
    for key, group in per_task.items():
        failing = [trial for trial in group if trial.status == "failed"]
        if not failing:
            continue
        worst = min(failing, key=lambda trial: (_trial_value(trial), trial.index))
        task = tasks.get(key)
        records.append({
            "suite": key[0], "task_id": key[1], "bucket": worst.bucket,
            "description": task.description if task else "",
            "input": task.input.content if task and task.input.content else "(empty input)",
            "trial_index": worst.index, "score": _trial_value(worst),
            "failed": len(failing), "trials": len(group),
            "graders": [result.model_dump() for result in worst.grader_results],
            "ending": worst.error or "",
            "workspace": _workspace(worst), "trace": _trace(worst),
        })
    records.sort(key=lambda r: (r["score"], -r["failed"], r["task_id"]))
    return records


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False,
                              keep_trailing_newline=True, trim_blocks=False, undefined=jinja2.StrictUndefined)


def render_request(*, selection: Selection, failures: list[dict[str, Any]], prompt: str, prompt_file: str,
                   manual: Manual, iteration_id: str, base_commit: str, agent_model: str,
                   max_changed_lines: int, token_budget: int,
                   rejected_ideas: list[str] | None = None, non_voting: list[str] | None = None,
                   judge_model: str = "", patch_format: str = "edits") -> tuple[str, int]:
    """The request text, and how many failures were left out to fit `token_budget`. `non_voting`
    names the graders whose scores the gate leaves out (LLM judges not calibrated on
    `judge_model`), so the patcher knows their verdicts decide nothing. `patch_format`
    "contrast" renders the short contrast request instead (`optimizer.proposal.contrast`)."""
    if patch_format == "contrast":
        text = render_contrast(selection=selection, failures=failures, prompt=prompt, rejected_ideas=rejected_ideas)
        return text, max(0, len(failures) - len(contrast_pieces(failures)))
    template = _environment().get_template("request.md.j2")
    context = dict(agent=selection.agent, targets=selection.targets, other_buckets=selection.others,
                   prompt=prompt.rstrip("\n"), prompt_file=prompt_file, manual=manual.text,
                   manual_hash=manual.sha256, iteration_id=iteration_id, base_commit=base_commit,
                   agent_model=agent_model, max_changed_lines=max_changed_lines,
                   rejected_ideas=rejected_ideas or [], non_voting=non_voting or [], judge_model=judge_model)
    shown = list(failures)
    while True:
        text = template.render(**context, failures=shown, omitted=len(failures) - len(shown))
        if len(text) <= token_budget * CHARS_PER_TOKEN or len(shown) <= 1:
            return text, len(failures) - len(shown)
        shown.pop()
