"""One iteration of the closed loop (`optimizer run`).

baseline -> select -> package `request.md` -> propose -> check the patch -> branch + commit ->
staged rerun -> gate -> record, and keep the branch (accepted) or delete it (rejected).

The baseline is evaluated at the base commit's prompt files (exported to a temporary folder, so
uncommitted edits in the user's checkout play no part), or reused from the store when a
completed run has the same fingerprints (prompt hashes, task hashes, grader versions, models,
trials, seed). The rerun is staged: the targeted buckets' train tasks first; when the gate's
improvement rule already fails on them, the candidate stops there. Otherwise the rest of the
changed agent's suites runs, including holdout and regression suites; suites of other agents
keep their baseline trials (their prompts did not change).
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime, timezone
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from optimizer import gitops
from optimizer.box import Box, open_box
from optimizer.checkout_state import CheckoutChanged, changes, checkout_state, stop_message
from optimizer.config import Settings, check_search_budget
from optimizer.errors import ConfigError
from optimizer.compare import compare, policy_from
from optimizer.evaluate import finish, judges_used, non_voting_graders
from optimizer.files import write_json, write_text
from optimizer.gate import Decision
from optimizer.ledger import current as current_ledger
from optimizer.models import context_window, validate_model
from optimizer.models.mock import check_patcher_script
from optimizer.patch import LintIndex, check_change, check_prompt_text
from optimizer.proposers import FixedProposer, Proposal, ProposalRequest, make_proposer
from optimizer.registry import get_agent
from optimizer.request import (Selection, exhausted_buckets, failure_records, load_manual, rejected_ideas,
                               render_request, select_targets)
from optimizer.runner import PlannedTrial, Runner, fingerprints, new_run_id, plan, record_ending
from optimizer.search import (PROMOTE, ScreeningAdapter, SearchOutcome, SearchProposer, load_records, pool_folder, run_search,
                              save_records, screening_sets, text_sha)
from optimizer.store import Store
from optimizer.suites import load_suites, with_regression_suites
from optimizer.types import RunResult, Suite, Trial, Usage

Log = Callable[[str], None]


@dataclass
class ProposalRecord:
    ordinal: int
    branch: str
    status: str
    """accepted | rejected_gate | rejected_check | no_patch | superseded | stopped (the proposer
    changed the user's checkout; the iteration ends there)"""
    reason: str
    rationale: str = ""
    diff: str = ""
    decision: Decision | None = None
    candidate_run_id: str | None = None
    commit_sha: str | None = None
    rollouts: int = 0
    model_rollouts: int = 0
    """Of `rollouts`, the trials that called the model (the rest were served from the cache)."""
    batches: int = 0
    """Batches of pairs the comparison ran (each followed by a look of the sequential tests)."""
    usage: Usage = field(default_factory=Usage)
    proposal_id: int | None = None


@dataclass
class IterationResult:
    iteration_id: str
    status: str
    """accepted | rejected | nothing_to_fix | dry_run | stopped"""
    base: gitops.Base
    run_dir: Path
    baseline_run_id: str | None = None
    baseline_reused: bool = False
    selection: Selection | None = None
    request_path: Path | None = None
    report_path: Path | None = None
    proposals: list[ProposalRecord] = field(default_factory=list)
    rollouts: int = 0
    """Trials run by this iteration (baseline unless reused, confirmation, candidates)."""
    model_rollouts: int = 0
    """Of `rollouts`, the trials that called the model (the rest were served from the cache)."""
    screen_rollouts: int = 0
    """Of `rollouts`, the screening trials (target confirmation and the search), never judged by the gate."""
    skipped: list[str] = field(default_factory=list)
    """Targets the baseline saw failing and a fresh confirmation did not (skipped this iteration)."""
    search: SearchOutcome | None = None

    @property
    def accepted(self) -> ProposalRecord | None:
        return next((p for p in self.proposals if p.status == "accepted"), None)


@dataclass
class LoopContext:
    settings: Settings
    project_root: Path
    store: Store
    log: Log = print
    on_trial: Callable[[Trial], None] | None = None
    make_progress: Callable[[int, str], Any] | None = None
    """Returns a context manager with `.update(trial)`, for progress display."""


def loop_settings(settings: Settings) -> Settings:
    """The loop's trial count: `trials` when set, else `loop_trials`."""
    return settings.model_copy(update={"trials": settings.trials or settings.loop_trials})


def _rel(repo, project_root: Path, prompt_file: str) -> str:
    return gitops.relative(repo, project_root / prompt_file)


def run_iteration(ctx: LoopContext, *, suite_names: list[str] | None = None, base_ref: str | None = None,
                  dry_run: bool = False, agent: str | None = None,
                  iteration_id: str | None = None, search_dir: Path | None = None) -> IterationResult:
    """One iteration. `search_dir` holds the search pools (default `<state_dir>/search`): a pool
    is found again there by its agent, base prompt and targets, and continued."""
    settings = loop_settings(ctx.settings)
    check_search_budget(settings)
    root = ctx.project_root
    repo = gitops.open_repo(root)
    base = gitops.resolve_base(repo, base_ref)
    suites = with_regression_suites(load_suites(suite_names or settings.suites, root), root)
    entries = {suite.spec.agent_name: get_agent(suite.spec.agent_name) for suite in suites}
    if agent is not None and agent not in entries:
        raise ConfigError(f"agent {agent!r} has no suite in this run (agents here: {', '.join(sorted(entries))})",
                          field="--agent", fix="name one of those agents, or add a --suite of that agent")
    prompt_paths = {name: _rel(repo, root, entry.prompt_file) for name, entry in entries.items()}
    prompt_files = {entry.prompt_file: prompt_paths[name] for name, entry in entries.items()}
    gitops.require_files(repo, base, list(prompt_paths.values()))
    validate_model(settings.agent_model, field="agent_model")
    if judges_used(suites):
        validate_model(settings.judge_model, field="judge_model")
    if not dry_run:
        _check_proposer(settings)
    planned = plan(suites, trials=settings.trials)

    state_dir = root / settings.state_dir
    gitops.ignore_state_dir(state_dir)
    iteration_id = iteration_id or new_run_id()
    ledger = current_ledger()
    if ledger is not None:
        ledger.scope["iteration_id"] = iteration_id
    run_dir = state_dir / "runs" / iteration_id
    run_dir.mkdir(parents=True, exist_ok=True)
    result = IterationResult(iteration_id=iteration_id, status="running", base=base, run_dir=run_dir)
    ctx.store.start_iteration(iteration_id=iteration_id, kind="run", base_ref=base.ref, base_commit=base.commit,
                              targets_json=[], settings_json=settings.model_dump())
    try:
        with tempfile.TemporaryDirectory(prefix="optimizer-base-") as folder:
            base_root = _export_prompts(repo, base.commit, prompt_files, Path(folder))
            iteration = _Iteration(ctx, settings, repo, suites, prompt_paths, prompt_files, planned, result, base_root)
            iteration.search_dir = search_dir or state_dir / "search"
            iteration.run(dry_run=dry_run, agent=agent)
    except CheckoutChanged:  # already recorded as stopped, with the proposal that did it
        raise
    except BaseException as exc:
        record_ending(exc, lambda status, reason: ctx.store.update_iteration(
            iteration_id, status=status, summary_json={"stop_reason": reason}))
        raise
    return result


def _export_prompts(repo, commit: str, prompt_files: dict[str, str], folder: Path) -> Path:
    """Write every prompt file as `commit` holds it under `folder`, at its path from the project
    root, for the runner's `prompt_root`: trials read exactly what was committed, never a working
    tree (the user's, or a proposer's clone with whatever it left there).

    `prompt_files` maps each prompt's path from the project root to its path in the repository."""
    for project_path, repo_path in prompt_files.items():
        target = folder / project_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(gitops.read_at(repo, commit, repo_path), encoding="utf-8")
    return folder


def _check_proposer(settings: Settings) -> None:
    if settings.proposer == "llm":
        validate_model(settings.patcher_model, field="patcher_model")
        if settings.patcher_model.startswith("mock/patcher"):
            if settings.mock_patcher_script and settings.mock_patcher_skill is not None:
                raise ConfigError("mock/patcher answers from a script or by skill, not both",
                                  field="mock_patcher_skill",
                                  fix="unset mock_patcher_skill or mock_patcher_script")
            if settings.mock_patcher_skill is None and not settings.mock_patcher_script:
                raise ConfigError("mock/patcher answers from a script, and none is set", field="mock_patcher_script",
                                  fix="set mock_patcher_script (or OPTIMIZER_MOCK_PATCHER_SCRIPT) to a JSON file "
                                      "of proposals, or mock_patcher_skill for a weak patcher of mock/sim agents, "
                                      "or choose another --patcher-model")
            if settings.mock_patcher_script:
                check_patcher_script(settings.mock_patcher_script)
    make_proposer(settings)


def _called_model(trials: list[Trial]) -> int:
    """Trials that made at least one model call (not served wholly from the response cache)."""
    return sum(1 for trial in trials if trial.transcript.usage.calls > 0)


class _Iteration:
    def __init__(self, ctx: LoopContext, settings: Settings, repo, suites: list[Suite],
                 prompt_paths: dict[str, str], prompt_files: dict[str, str], planned: list[PlannedTrial],
                 result: IterationResult, base_root: Path):
        self.ctx, self.settings, self.repo, self.suites = ctx, settings, repo, suites
        self.prompt_paths, self.prompt_files = prompt_paths, prompt_files
        self.planned, self.result, self.base_root = planned, result, base_root
        self.store, self.log = ctx.store, ctx.log
        self.baseline: list[Trial] = []
        self.fresh_base: dict[tuple[str, str, int], Trial] = {}
        """Base-prompt trials at fresh indexes, shared by every candidate of the iteration."""
        self.confirm_run_id: str | None = None
        self.regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
        self.policy = policy_from(settings)
        self.non_voting = non_voting_graders(ctx.store, suites, settings.judge_model) if judges_used(suites) else []
        self.search_dir: Path = ctx.project_root / settings.state_dir / "search"
        self.screen_runs: dict[str, str] = {}
        """Per prompt (text sha), the run its screening trials are recorded in."""
        self.adapter: ScreeningAdapter | None = None

    def run(self, *, dry_run: bool, agent: str | None) -> None:
        result, store, base = self.result, self.store, self.result.base
        for path in self.prompt_paths.values():
            if gitops.uncommitted(self.repo, path):
                self.log(f"note: {path} has uncommitted changes; the loop uses the committed version "
                         f"at {base.commit[:12]}")
        self.baseline = self._baseline()
        rejected = store.rejected_proposals()
        exhausted = exhausted_buckets(rejected, base.commit, self.settings.bucket_patience)
        if exhausted:
            self.log(f"not targeted ({self.settings.bucket_patience}+ rejected proposals at this base): "
                     + ", ".join(sorted("/".join(key) for key in exhausted)))
        selection = self._select(agent, exhausted)
        if selection is None:
            result.status = "nothing_to_fix"
            self.log("no train trial failed: nothing to fix" if not exhausted and not result.skipped else
                     "every failing bucket already had its rejected proposals at this base, or passed its fresh "
                     "confirmation: nothing new to try")
            store.update_iteration(result.iteration_id, status="nothing_to_fix",
                                   baseline_run_id=result.baseline_run_id, summary_json=_summary(result))
            return
        result.selection = selection
        prompt_path = self.prompt_paths[selection.agent]
        prompt = gitops.read_at(self.repo, base.commit, prompt_path)
        manual = load_manual(self.ctx.project_root, selection.agent)
        failures = failure_records(self.baseline, self.suites, selection)
        budget = self.settings.request_token_budget
        window = context_window(self.settings.patcher_model) if self.settings.proposer == "llm" else None
        if window:  # half the patcher's context: the rest holds its instructions and the answer
            budget = min(budget, window // 2)
        request, omitted = render_request(
            selection=selection, failures=failures, prompt=prompt, prompt_file=prompt_path, manual=manual,
            iteration_id=result.iteration_id, base_commit=base.commit, agent_model=self.settings.agent_model,
            max_changed_lines=self.settings.max_changed_lines, token_budget=budget,
            rejected_ideas=rejected_ideas(rejected, {f"{t.suite}/{t.bucket}" for t in selection.targets}),
            non_voting=self.non_voting, judge_model=self.settings.judge_model)
        result.request_path = result.run_dir / "request.md"
        write_text(result.request_path, request)
        targets = [f"{t.suite}/{t.bucket}" for t in selection.targets]
        self.request_args = dict(selection=selection, prompt_file=prompt_path, manual=manual,
                                 iteration_id=result.iteration_id, base_commit=base.commit,
                                 agent_model=self.settings.agent_model, max_changed_lines=self.settings.max_changed_lines,
                                 token_budget=budget, non_voting=self.non_voting, judge_model=self.settings.judge_model,
                                 rejected_ideas=rejected_ideas(rejected, set(targets)))
        self.log(f"targets: {', '.join(targets)} ({len(failures)} failing task(s), {omitted} left out of the request)")
        self.log(f"request: {result.request_path}")
        store.update_iteration(result.iteration_id, agent=selection.agent, baseline_run_id=result.baseline_run_id,
                               targets_json=targets, request_path=str(result.request_path),
                               manual_sha256=manual.sha256)
        if dry_run:
            result.status = "dry_run"
            store.update_iteration(result.iteration_id, status="dry_run", summary_json=_summary(result))
            return

        proposer = make_proposer(self.settings)
        if proposer.note:
            self.log(f"note: {proposer.note}")
        lint_index = LintIndex.from_suites(self.suites)
        if self.settings.search_rollouts:
            self._search_then_gate(proposer, selection, prompt, prompt_path, lint_index, manual.sha256)
        else:
            candidates = self.settings.candidates
            for number in range(1, candidates + 1):
                self._gate_one(proposer, selection, prompt, prompt_path, lint_index, manual.sha256,
                               name=f"{selection.agent}-{number}", note=f"{number} of {candidates} this iteration")

        accepted = [p for p in result.proposals if p.status == "accepted"]
        if len(accepted) > 1:
            best = max(accepted, key=lambda p: _targeted_gain(p.decision))
            for other in accepted:
                if other is not best:
                    other.status, other.reason = "superseded", f"accepted, but {best.branch} gained more"
                    gitops.delete_branch(self.repo, other.branch)
                    store.update_proposal(other.proposal_id, status=other.status, reason=other.reason)
        result.status = "accepted" if result.accepted else "rejected"
        result.report_path = _write_report(result)
        store.update_iteration(result.iteration_id, status=result.status, summary_json=_summary(result))

    def _gate_one(self, proposer, selection: Selection, prompt: str, prompt_path: str, lint_index: LintIndex,
                  manual_sha: str, *, name: str, note: str) -> ProposalRecord:
        """One proposal from `proposer` through the checks and the gate, recorded."""
        result, store = self.result, self.store
        branch = f"optimizer/{result.iteration_id}/{name}"
        record = ProposalRecord(ordinal=len(store.proposals()) + 1, branch=branch, status="running", reason="")
        result.proposals.append(record)
        self.log(f"proposal {record.ordinal} ({note}) on {branch} ({proposer.name} proposer)")
        try:
            with open_box(self.repo, branch=branch, base_commit=result.base.commit,
                          parent=self.ctx.project_root / self.settings.state_dir / "boxes") as box:
                self._proposal(proposer, record, box, selection, prompt, prompt_path, lint_index)
        except BaseException:
            gitops.delete_branch(self.repo, branch)
            raise
        if record.status not in ("accepted", "stopped"):  # stopped: run no git in a changed repository
            gitops.delete_branch(self.repo, branch)
        _store_proposal(store, result, record, selection.agent, proposer.name, self.settings, manual_sha)
        detail = record.reason.removeprefix("accepted: ").removeprefix("rejected: ")
        self.log(f"proposal {record.ordinal}: {record.status}: {detail}")
        if record.status == "stopped":
            self._stop(record, confined=proposer.confined)
        return record

    # ---------------------------------------------------------------- target selection, screening
    def _select(self, agent: str | None, exhausted: set[tuple[str, str]]) -> Selection | None:
        """The targets, each confirmed failing on fresh trials (`confirm_trials`): a target
        whose confirmation passes every trial is skipped for the next failing bucket."""
        skip = set(exhausted)
        confirm = self.settings.confirm_trials
        if confirm is None:
            confirm = self.settings.batch_pairs if self.settings.search_rollouts else 0
        while True:
            selection = select_targets(self.baseline, self.suites, max_targets=self.settings.target_buckets,
                                       agent=agent, skip=skip)
            if selection is None or not confirm:
                return selection
            adapter = self._adapter(selection)
            prompt = self._base_prompt(selection.agent)
            solved = set()
            for target in selection.targets:
                keys = sorted(key for key, item in adapter.items.items() if item.task.bucket == target.bucket
                              and key[0] == target.suite)
                trials = adapter.confirm(prompt, keys, confirm)
                if trials and all(trial.status == "passed" for trial in trials):
                    solved.add((target.suite, target.bucket))
            if not solved:
                return selection
            names = sorted("/".join(key) for key in solved)
            self.result.skipped += names
            self.log(f"skipped (the baseline saw failures; {confirm} fresh trials each all passed): "
                     f"{', '.join(names)}")
            skip |= solved

    def _base_prompt(self, agent: str) -> str:
        return gitops.read_at(self.repo, self.result.base.commit, self.prompt_paths[agent])

    def _adapter(self, selection: Selection) -> ScreeningAdapter:
        """The iteration's screening adapter (one per iteration: its trial indexes never repeat)."""
        if self.adapter is None:
            items = {(item.suite.name, item.task.id): item for item in self.planned
                     if item.task.split == "train" and item.suite.spec.agent_name == selection.agent}
            self.adapter = ScreeningAdapter(items, lambda planned, prompt, label: self._screen(
                planned, selection.agent, prompt, label), targets=set(), failures=lambda trials: [])
        return self.adapter

    def _screen(self, planned: list[PlannedTrial], agent: str, prompt: str, label: str) -> list[Trial]:
        """Screening trials of `agent` with `prompt`, through the runner, in one run per prompt."""
        sha = text_sha(prompt)
        with tempfile.TemporaryDirectory(prefix="optimizer-screen-") as folder:
            root = Path(folder)
            shutil.copytree(self.base_root, root, dirs_exist_ok=True)
            write_text(root / get_agent(agent).prompt_file, prompt)
            run = self._run(planned, root, kind="screen", label=label, run_id=self.screen_runs.get(sha))
        self.screen_runs[sha] = run.run_id
        if self.store.has_run(run.run_id):
            finish(run, self.store)
        count, calls = len(planned), _called_model(run.trials)
        self.result.rollouts += count
        self.result.model_rollouts += calls
        self.result.screen_rollouts += count
        return run.trials

    def _search_then_gate(self, proposer, selection: Selection, prompt: str, prompt_path: str,
                          lint_index: LintIndex, manual_sha: str) -> None:
        """gepa's search over the targets for `search_rollouts` trials, then the gate for the
        promoted candidates, best first, until one is accepted."""
        result, settings = self.result, self.settings
        targets = {(t.suite, t.bucket) for t in selection.targets}
        adapter = self._adapter(selection)
        adapter.targets = targets
        adapter.failures = lambda trials: failure_records(trials, self.suites, selection)
        folder = pool_folder(self.search_dir, selection.agent, prompt, targets)
        records = load_records(folder)
        if records:
            self.log(f"search: continuing the pool in {folder} ({len(records)} candidate(s) so far)")

        def check(patched: str) -> str | None:
            found = check_prompt_text(prompt_file=prompt_path, base_prompt=prompt, patched=patched,
                                      max_changed_lines=settings.max_changed_lines, index=lint_index)
            return None if found.passed else f"{found.rule}: {found.reason}"

        def render(parent: str, failures: list[dict[str, Any]]) -> str:
            return render_request(prompt=parent, failures=failures, **self.request_args)[0]

        search_proposer = SearchProposer(
            adapter, render=render, check=check, diff=lambda text: _text_diff(prompt, text, prompt_path),
            propose=lambda path, parent, number: self._search_proposal(proposer, selection, path, parent, number,
                                                                       prompt_path, check, manual_sha),
            records=records, folder=folder, log=self.log)
        train, val = screening_sets(self.planned, targets, selection.agent, settings.search_rollouts)
        self.log(f"search: {settings.search_rollouts} screening trials on gepa ({len(train)} minibatch tasks, "
                 f"{len(val)} screening tasks), pool {folder}")
        outcome = run_search(adapter, search_proposer, base_prompt=prompt, train=train, val=val,
                             budget=settings.search_rollouts, folder=folder, seed=settings.seed,
                             promote=min(PROMOTE, settings.candidates))
        result.search = outcome
        self.log(f"search: {len(outcome.candidates)} candidate(s), {len(outcome.promoted)} promoted "
                 f"(base prompt screened at {outcome.base_score:.2f})")
        for rank, candidate in enumerate(outcome.promoted, 1):
            record = self._gate_one(FixedProposer(proposer, candidate.text, candidate.rationale), selection, prompt,
                                    prompt_path, lint_index, manual_sha, name=f"{selection.agent}-{rank}",
                                    note=f"search candidate {candidate.number}, promoted {rank} of {len(outcome.promoted)}")
            candidate.status, candidate.branch = record.status, record.branch
            candidate.reason = f"gate: {record.reason}"
            _save_search(result, outcome)
            if record.status == "accepted":
                for later in outcome.promoted[rank:]:
                    later.status, later.reason = "not_promoted", f"{record.branch} was accepted first"
                break
        _save_search(result, outcome)

    def _search_proposal(self, proposer, selection: Selection, request_path: Path, parent: str, number: int,
                         prompt_path: str, check, manual_sha: str) -> tuple[str | None, str, str | None]:
        """One proposal of the search: the proposer edits `parent` in a box of its own."""
        result = self.result
        branch = f"optimizer/{result.iteration_id}/search-{number}"
        before = checkout_state(self.repo)
        with open_box(self.repo, branch=branch, base_commit=result.base.commit,
                      parent=self.ctx.project_root / self.settings.state_dir / "boxes") as box:
            target = box.workdir / prompt_path
            target.write_text(parent, encoding="utf-8")
            proposal = proposer.propose(ProposalRequest(
                request=request_path.read_text(encoding="utf-8"), request_path=request_path, prompt_file=prompt_path,
                workdir=box.workdir, ordinal=number, check=check, box=box))
            patched = target.read_text(encoding="utf-8") if target.is_file() else None
        if proposal.log:
            write_text(request_path.with_name(f"proposal-{number}.log"), proposal.log)
        changed = changes(before, checkout_state(self.repo))
        if changed:
            record = ProposalRecord(ordinal=len(self.store.proposals()) + 1, branch=branch, status="stopped",
                                    reason=stop_message(changed), rationale=proposal.rationale, usage=proposal.usage)
            result.proposals.append(record)
            _store_proposal(self.store, result, record, selection.agent, proposer.name, self.settings, manual_sha)
            self._stop(record, confined=proposer.confined)
        return (None if proposal.error else patched), proposal.rationale, proposal.error

    def _stop(self, record: ProposalRecord, *, confined: bool) -> None:
        """End the iteration on a proposer that changed the user's checkout: recorded as stopped,
        then raised, so `run` and `nightly` exit with the harness code (3), not a verdict."""
        result = self.result
        result.status = "stopped"
        result.report_path = _write_report(result)
        self.store.update_iteration(result.iteration_id, status="stopped", summary_json=_summary(result))
        fix = ("the proposer could not write there, so if you changed the checkout yourself meanwhile, run again"
               if confined else
               "confine the proposer with bubblewrap (the note at the start of the run says why it was not)")
        raise CheckoutChanged(record.reason, path=self.repo.working_tree_dir,
                              fix=f"undo those changes by hand (they are still there; nothing was merged) and check "
                                  f"the proposer; {fix}")

    def _baseline(self) -> list[Trial]:
        result = self.result
        wanted = fingerprints(self.suites, self.settings, self.base_root, self.planned)
        reuse = self.store.find_reusable_run(wanted, len(self.planned))
        if reuse:
            self.log(f"baseline: reusing run {reuse} (the same run spec: commit, code, prompts, tasks, fixtures, graders, models, packages)")
            result.baseline_run_id, result.baseline_reused = reuse, True
            return self.store.load_trials(reuse)
        self.log(f"baseline: {len(self.planned)} trials at {result.base.commit[:12]}")
        run = self._run(self.planned, self.base_root, kind="baseline", label="baseline")
        finish(run, self.store)
        result.baseline_run_id = run.run_id
        result.rollouts += len(self.planned)
        result.model_rollouts += _called_model(run.trials)
        return run.trials

    def _base_trials(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Base-prompt trials at fresh indexes: run once per iteration, recorded in one run, and
        shared by every candidate."""
        missing = [item for item in planned if (item.suite.name, item.task.id, item.index) not in self.fresh_base]
        if missing:
            self.confirm_run_id = self.confirm_run_id or new_run_id()
            run = self._run(missing, self.base_root, kind="confirm", label=f"{label} (base prompt)",
                            run_id=self.confirm_run_id)
            self.confirm_run_id = run.run_id  # a resumed job adopts the unfinished run it left
            self.result.rollouts += len(missing)
            self.result.model_rollouts += _called_model(run.trials)
            for trial in run.trials:
                self.fresh_base[(trial.suite, trial.task_id, trial.index)] = trial
            # the run's summary covers every fresh base trial so far, not this batch alone
            finish(run.model_copy(update={"trials": list(self.fresh_base.values())}), self.store)
        return [self.fresh_base[(item.suite.name, item.task.id, item.index)] for item in planned]

    def _run(self, planned: list[PlannedTrial], prompt_root: Path, *, kind: str, label: str,
             run_id: str | None = None) -> RunResult:
        return _run_trials(self.ctx, self.settings, self.suites, planned, prompt_root, kind=kind, label=label,
                           run_id=run_id)

    def _proposal(self, proposer, record: ProposalRecord, box: Box, selection: Selection, prompt: str,
                  prompt_path: str, lint_index: LintIndex) -> None:
        result, base, workdir = self.result, self.result.base, box.workdir
        def check(patched: str) -> str | None:
            found = check_prompt_text(prompt_file=prompt_path, base_prompt=prompt, patched=patched,
                                      max_changed_lines=self.settings.max_changed_lines, index=lint_index)
            return None if found.passed else f"{found.rule}: {found.reason}"

        before = checkout_state(self.repo)
        proposal: Proposal = proposer.propose(ProposalRequest(
            request=result.request_path.read_text(encoding="utf-8"), request_path=result.request_path,
            prompt_file=prompt_path, workdir=workdir, ordinal=record.ordinal, check=check, box=box))
        record.rationale, record.usage = proposal.rationale, proposal.usage
        if proposal.log:
            write_text(result.run_dir / f"proposal-{record.ordinal}.log", proposal.log)
        changed = changes(before, checkout_state(self.repo))
        if changed:  # checked before any git command of ours reads the user's (maybe changed) config
            record.status, record.reason = "stopped", stop_message(changed)
            return
        try:
            change = gitops.final_change(self.repo, workdir, base.commit)
        except gitops.WorktreeError as exc:
            record.status, record.reason = ("no_patch", proposal.error) if proposal.error else \
                ("rejected_check", f"unreadable: {exc.message}")
            return
        record.diff = change.diff
        if proposal.error:  # a proposer that failed or timed out: what it left in its clone is not used
            record.status, record.reason = "no_patch", proposal.error
            return
        found = check_change(changed_files=change.files, allowed_file=prompt_path, base_prompt=prompt,
                             patched=gitops.file_at(self.repo, change.tree, prompt_path), diff=change.diff,
                             max_changed_lines=self.settings.max_changed_lines, index=lint_index)
        if not found.passed:
            record.status, record.reason = "rejected_check", f"{found.rule}: {found.reason}"
            return
        headline = f"{selection.agent}: prompt patch for {', '.join(t.bucket for t in selection.targets)}"
        record.commit_sha = gitops.commit_change(self.repo, record.branch, base.commit, change.tree,
                                                 _commit_message(selection, None, record, result, headline=headline))
        with tempfile.TemporaryDirectory(prefix="optimizer-candidate-") as folder:
            decision = self._compare(record, selection,
                                     _export_prompts(self.repo, record.commit_sha, self.prompt_files, Path(folder)))
        record.decision = decision
        record.status = "accepted" if decision.accepted else "rejected_gate"
        record.reason = decision.summary
        record.commit_sha = gitops.commit_change(self.repo, record.branch, base.commit, change.tree,
                                                 _commit_message(selection, decision, record, result,
                                                                 headline=headline))
        write_json(result.run_dir / f"decision-{record.ordinal}.json", decision.as_dict())

    def _compare(self, record: ProposalRecord, selection: Selection, prompt_root: Path) -> Decision:
        """The candidate (its prompts under `prompt_root`) against the base, recorded in a run of its own."""
        result = self.result
        targets = {(t.suite, t.bucket) for t in selection.targets}
        record.candidate_run_id = run_id = new_run_id()
        sides = _LoopSides(self, prompt_root, run_id)
        comparison = compare(sides, planned=self.planned, baseline=self.baseline, targets=targets,
                             agent=selection.agent, regression_suites=self.regression, policy=self.policy,
                             non_voting=self.non_voting, log=self.log)
        decision = comparison.decision
        record.batches = comparison.batches
        record.rollouts, record.model_rollouts = sides.ran(), sides.model_calls
        result.rollouts += sides.candidate_count
        result.model_rollouts += sides.candidate_model_calls
        record.candidate_run_id = run_id = sides.run_id
        run = sides.result(self.settings)
        if decision.stage != "targeted":  # other agents' suites: their prompts did not change
            recorded = self.store.recorded_trials(run_id)
            for trial in self.baseline:
                if self._agent_of(trial.suite) != selection.agent:
                    if (trial.suite, trial.task_id, trial.index) not in recorded:
                        self.store.record_trial(run_id, trial)
                    run.trials.append(trial)
        if self.store.has_run(run_id):
            finish(run, self.store)
        return decision

    def _agent_of(self, suite_name: str) -> str:
        return next(suite.spec.agent_name for suite in self.suites if suite.name == suite_name)


class _LoopSides:
    """`compare`'s two prompts in the loop: base trials from the iteration's shared fresh runs,
    candidate trials recorded in the proposal's run."""

    def __init__(self, iteration: _Iteration, prompt_root: Path, run_id: str):
        self.iteration, self.prompt_root, self.run_id = iteration, prompt_root, run_id
        self.trials: list[Trial] = []
        self.candidate_count = self.candidate_model_calls = self.base_count = self.base_model_calls = 0

    def base(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        result = self.iteration.result
        rollouts, calls = result.rollouts, result.model_rollouts
        trials = self.iteration._base_trials(planned, label)
        self.base_count += result.rollouts - rollouts
        self.base_model_calls += result.model_rollouts - calls
        return trials

    def candidate(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        run = self.iteration._run(planned, self.prompt_root, kind="candidate", label=label, run_id=self.run_id)
        self.run_id = run.run_id  # a resumed job adopts the unfinished run it left: one run, one id
        self.trials += run.trials
        self.candidate_count += len(planned)
        self.candidate_model_calls += _called_model(run.trials)
        return run.trials

    def ran(self) -> int:
        return self.base_count + self.candidate_count

    @property
    def model_calls(self) -> int:
        return self.base_model_calls + self.candidate_model_calls

    def result(self, settings: Settings) -> RunResult:
        return RunResult(run_id=self.run_id, started_at=datetime.now(timezone.utc), settings=settings.model_dump(),
                         trials=list(self.trials))


def _run_trials(ctx: LoopContext, settings: Settings, suites, planned, prompt_root: Path, *, kind: str,
                label: str, run_id: str | None = None) -> RunResult:
    """Run `planned` as (part of) a run. Trials already recorded are kept, not redone: those of
    `run_id` when it exists, or of an unfinished run of this kind with the same fingerprints (a
    job killed mid-run and resumed), whose id is then adopted."""
    store = ctx.store
    exists = run_id is not None and store.has_run(run_id)
    if not exists:
        unfinished = store.find_unfinished_run(fingerprints(suites, settings, prompt_root, planned), kind)
        if unfinished:
            run_id, exists = unfinished, True
    kept: list[Trial] = []
    if exists:
        done = store.recorded_trials(run_id)
        if done:
            wanted = {(item.suite.name, item.task.id, item.index) for item in planned}
            kept = [t for t in store.load_trials(run_id) if (t.suite, t.task_id, t.index) in wanted]
            planned = [item for item in planned if (item.suite.name, item.task.id, item.index) not in done]
            if kept:
                ctx.log(f"{label}: {len(kept)} trials already recorded in run {run_id} are kept")
    runner = Runner(settings, store, project_root=ctx.project_root, prompt_root=prompt_root)
    if not planned:
        run = RunResult(run_id=run_id, started_at=datetime.now(timezone.utc), settings=settings.model_dump())
    elif ctx.make_progress is None:
        runner.on_trial = ctx.on_trial
        run = runner.run(suites, planned, run_id=run_id, kind=kind)
    else:
        with ctx.make_progress(len(planned), label) as progress:
            runner.on_trial = progress.update
            run = runner.run(suites, planned, run_id=run_id, kind=kind)
    run.trials[:0] = kept
    return run


def _commit_message(selection: Selection, decision: Decision | None, record: ProposalRecord,
                    result: IterationResult, *, headline: str) -> str:
    lines = [headline, ""]
    if decision is None:
        lines.append("Gate: not run yet")
    else:
        lines.append(f"Gate ({decision.mode}, {decision.stage}): {'accepted' if decision.accepted else 'rejected'}"
                     f" after {record.rollouts} trials in {record.batches} batch(es) of pairs")
        lines.extend(f"  {reason}" for reason in decision.reasons)
        lines.append("")
        lines.append("Bucket scores (before -> after, change):")
        for bucket in decision.buckets:
            mark = "*" if bucket.targeted else " "
            lines.append(f" {mark} {bucket.suite}/{bucket.bucket}: {_f(bucket.before)} -> {_f(bucket.after)} "
                         f"({bucket.change:+.2f}, {bucket.pairs} pairs, {bucket.verdict or 'not tested'})")
    lines += ["", f"Targeted buckets: {', '.join(f'{t.suite}/{t.bucket}' for t in selection.targets)}",
              f"Iteration: {result.iteration_id}", f"Request: {result.request_path}"]
    if record.rationale:
        lines += ["", "Rationale:", record.rationale]
    return "\n".join(lines) + "\n"


def _text_diff(before: str, after: str, path: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}"))


def _save_search(result: IterationResult, outcome: SearchOutcome) -> None:
    """The search's record: every candidate, its screening scores and what became of it, in the
    iteration's folder (`search.json`, read by `review` and the report) and in the pool's."""
    save_records(outcome.folder, outcome.candidates)
    write_json(result.run_dir / "search.json", _search_summary(outcome))


def _search_summary(outcome: SearchOutcome) -> dict[str, Any]:
    return {"pool": str(outcome.folder), "rollouts": outcome.rollouts, "base_score": outcome.base_score,
            "base_target_score": outcome.base_target_score,
            "candidates": [candidate.summary() for candidate in outcome.candidates]}


def _search_lines(outcome: SearchOutcome) -> list[str]:
    """The search's candidates as a table of the report (`search.json` has the diffs)."""
    lines = [f"## Search: {len(outcome.candidates)} candidate(s), {len(outcome.promoted)} promoted", "",
             f"{outcome.rollouts} screening trials; the base prompt screened at {_f(_or_nan(outcome.base_score))} "
             f"(targets {_f(_or_nan(outcome.base_target_score))}). Pool: `{outcome.folder}`.", "",
             "| # | status | minibatch (parent -> child) | screening | targets | why |", "|---|---|---|---|---|---|"]
    for c in outcome.candidates:
        minibatch = f"{sum(c.parent_minibatch):.2f} -> {sum(c.minibatch):.2f}" if c.minibatch else "–"
        lines.append(f"| {c.number} | {c.status} | {minibatch} | {_f(_or_nan(c.screen_score))} | "
                     f"{_f(_or_nan(c.target_score))} | {c.reason.replace('|', '/').splitlines()[0] if c.reason else ''} |")
    return lines + [""]


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def _f(value: float) -> str:
    return "n/a" if value != value else f"{value:.2f}"


def _targeted_gain(decision: Decision | None) -> float:
    if decision is None:
        return float("-inf")
    return sum(bucket.change for bucket in decision.buckets if bucket.targeted)


def _store_proposal(store: Store, result: IterationResult, record: ProposalRecord, agent: str, proposer: str,
                    settings: Settings, manual_sha: str) -> None:
    record.proposal_id = store.record_proposal(
        iteration_id=result.iteration_id, ordinal=record.ordinal, agent=agent, branch=record.branch,
        proposer=proposer, patcher_model=settings.patcher_model if proposer == "llm" else None,
        manual_sha256=manual_sha, status=record.status, reason=record.reason, rationale=record.rationale,
        diff=record.diff, commit_sha=record.commit_sha if record.status == "accepted" else None,
        candidate_run_id=record.candidate_run_id,
        decision_json=record.decision.as_dict() if record.decision else None,
        usage_json=record.usage.model_dump(), rollouts=record.rollouts)


def _summary(result: IterationResult) -> dict[str, Any]:
    return {"status": result.status, "baseline_run_id": result.baseline_run_id,
            "baseline_reused": result.baseline_reused, "rollouts": result.rollouts,
            "screen_rollouts": result.screen_rollouts, "skipped_targets": result.skipped,
            "search": _search_summary(result.search) if result.search else None,
            "request": str(result.request_path) if result.request_path else None,
            "report": str(result.report_path) if result.report_path else None,
            "proposals": [{"ordinal": p.ordinal, "branch": p.branch, "status": p.status, "reason": p.reason,
                           "rollouts": p.rollouts, "batches": p.batches, "patcher_cost_usd": p.usage.cost_usd,
                           "patcher_tokens": p.usage.total_tokens} for p in result.proposals]}


def _write_report(result: IterationResult) -> Path:
    lines = [f"# Iteration {result.iteration_id}", "",
             f"Base `{result.base.ref}` at `{result.base.commit[:12]}`; baseline run `{result.baseline_run_id}`"
             f"{' (reused)' if result.baseline_reused else ''}; {result.rollouts} rollouts.", ""]
    if result.selection:
        lines.append("Targets: " + ", ".join(f"{t.suite}/{t.bucket}" for t in result.selection.targets))
        lines.append("")
    if result.skipped:
        lines += ["Skipped (failing in the baseline, passing every fresh confirmation trial): "
                  + ", ".join(result.skipped), ""]
    if result.search:
        lines += _search_lines(result.search)
    for record in result.proposals:
        lines += [f"## Proposal {record.ordinal}: {record.status}", "", f"Branch `{record.branch}`.", "",
                  record.reason, ""]
        if record.rationale:
            lines += ["Rationale: " + record.rationale, ""]
        if (result.run_dir / f"proposal-{record.ordinal}.log").is_file():
            lines += [f"The proposer's own account: `proposal-{record.ordinal}.log`.", ""]
        if record.diff:
            lines += ["```diff", record.diff.rstrip("\n"), "```", ""]
        if record.decision:
            lines += ["| bucket | pairs | before | after | change | 95% interval | verdict | p (improve) | p (harm) "
                      "| detectable drop |", "|---|---|---|---|---|---|---|---|---|---|"]
            for bucket in record.decision.buckets:
                name = f"**{bucket.bucket}**" if bucket.targeted else bucket.bucket
                interval = "–" if bucket.ci_low != bucket.ci_low else f"[{bucket.ci_low:+.2f}, {bucket.ci_high:+.2f}]"
                p_up = bucket.p_improve_holm if bucket.p_improve_holm is not None else bucket.p_improve
                lines.append(f"| {bucket.suite}/{name} | {bucket.pairs} | {_f(bucket.before)} | {_f(bucket.after)} | "
                             f"{bucket.change:+.2f} | {interval} | {bucket.verdict or '–'} | {p_up:.3f} | "
                             f"{bucket.p_harm:.3f} | {_f(bucket.mde)} |")
            lines.append("")
            if record.decision.non_voting:
                lines += [f"Not voting (LLM judges not calibrated on the judge model in use): "
                          f"{', '.join(record.decision.non_voting)}.", ""]
            lines += [f"- {reason}" for reason in record.decision.reasons]
            lines.append("")
    path = result.run_dir / "report.md"
    write_text(path, "\n".join(lines))
    return path

