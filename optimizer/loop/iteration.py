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

This module holds the iteration itself; its records are in `optimizer.loop.records`, where its
trials run in `optimizer.loop.staging`, and what it writes for people in `optimizer.loop.render`.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from optimizer import gitops
from optimizer.proposal.ablation import ablate
from optimizer.proposal.box import Box, open_box, stop_left_proposers
from optimizer.loop.checkout_state import CheckoutChanged, changes, checkout_state, stop_message
from optimizer.settings.config import check_search_budget
from optimizer.errors import ConfigError
from optimizer.comparison.compare import buckets_named, compare
from optimizer.trials.evaluate import finish, judges_used, non_voting_graders
from optimizer.files import shown_path, write_json, write_text
from optimizer.loop.hand_edit import HAND_EDIT_LINES, PROPOSER, HandEdit, HandEditProposer, hand_selection
from optimizer.gate import Decision
from optimizer.ledger import current as current_ledger
from optimizer.loop.records import (IterationResult, Log, LoopContext, ProposalRecord, iteration_summary,
                                    save_search, store_proposal)
from optimizer.proposal.diffs import unified as text_diff
from optimizer.loop.render import commit_message, write_report
from optimizer.loop.staging import LoopSides, Stage, export_prompts, unseen_from
from optimizer.models import context_window, validate_model
from optimizer.models.mock import check_patcher_script
from optimizer.proposal.examples import Example, template_path
from optimizer.proposal.examples import choose as choose_examples
from optimizer.proposal.patch import LintIndex, check_change, check_prompt_text
from optimizer.proposal.proposers import (LOG_TAIL_LINES, FixedProposer, Proposal, ProposalRequest, asked_format,
                                 make_proposer, patch_format)
from optimizer.registry import get_agent
from optimizer.scoring import trial_value
from optimizer.store.digest import NightScope, StoreChanged, StoreWatch
from optimizer.proposal.request import (Manual, Selection, exhausted_buckets, failure_records, load_manual, rejected_ideas,
                               render_request, select_targets)
from optimizer.proposal.targets import prefers_named
from optimizer.trials.runner import PlannedTrial, new_run_id, plan, record_ending
from optimizer.settings.parts import LoopSettings, ProposalSettings
from optimizer.proposal.search import (PROMOTE, SCREEN_INDEX, ScreeningAdapter, SearchProposer, load_records, pool_folder,
                              run_search, screening_sets, text_sha)
from optimizer.nightly.spending import decision_alpha
from optimizer.suites import load_suites, with_regression_suites
from optimizer.types import Suite, Trial
from optimizer.nightly.watch import WatchNight, run_watch

__all__ = ["IterationResult", "Log", "LoopContext", "ProposalRecord", "run_iteration"]


def _rel(repo, project_root: Path, prompt_file: str) -> str:
    return gitops.relative(repo, project_root / prompt_file)


def run_iteration(ctx: LoopContext, *, suite_names: list[str] | None = None, base_ref: str | None = None,
                  dry_run: bool = False, agent: str | None = None,
                  iteration_id: str | None = None, search_dir: Path | None = None,
                  night_decisions: int | None = None, night: NightScope | None = None,
                  watch: WatchNight | None = None, hand_edit: HandEdit | None = None) -> IterationResult:
    """One iteration. `search_dir` holds the search pools (default `<state_dir>/search`): a pool
    is found again there by its agent, base prompt and targets, and continued. Inside a night,
    `night_decisions` is how many candidates the night gated before this iteration: the gate
    then tests each candidate at its share of `night_alpha` (`optimizer.nightly.spending`), and `night`
    is what of the night's record the store watch covers besides the trials (`StoreWatch`).
    With `watch`, the iteration runs the night's watch of merged patches instead
    (`optimizer.nightly.watch.run_watch`) and ends `watched`. With `hand_edit`, the iteration gates that
    edit of its agent's prompt instead of asking a proposer (`optimizer.loop.hand_edit`)."""
    check_search_budget(ctx.settings)
    settings = ctx.settings.loop
    root = ctx.project_root
    repo = gitops.open_repo(root)
    base = gitops.resolve_base(repo, base_ref)
    suites, prompt_paths = _prepare(repo, base, root, settings, suite_names, agent,
                                    check_proposer=not dry_run and hand_edit is None)
    prompt_files = {get_agent(name).prompt_file: path for name, path in prompt_paths.items()}
    planned = plan(suites, trials=settings.trials, lone_task_factor=settings.lone_task_factor)

    state_dir = root / settings.state_dir
    gitops.ignore_state_dir(state_dir)
    left = stop_left_proposers(state_dir / "boxes")
    if left:
        ctx.log(f"stopped {len(left)} process(es) a proposer command of a killed run left running")
    iteration_id = iteration_id or new_run_id()
    ledger = current_ledger()
    if ledger is not None:
        ledger.scope["iteration_id"] = iteration_id
    run_dir = state_dir / "runs" / iteration_id
    run_dir.mkdir(parents=True, exist_ok=True)
    result = IterationResult(iteration_id=iteration_id, status="running", base=base, run_dir=run_dir)
    kind = "watch" if watch else "gate" if hand_edit else "run"
    ctx.store.iterations.start(iteration_id, kind=kind, base_ref=base.ref,
                               base_commit=base.commit, settings=dict(settings.runner.record))
    try:
        with tempfile.TemporaryDirectory(prefix="optimizer-base-") as folder:
            base_root = export_prompts(repo, base.commit, prompt_files, Path(folder))
            options = IterationOptions(search_dir or state_dir / "search", night_decisions, night, hand_edit)
            iteration = _Iteration(ctx, settings, repo, suites, prompt_paths, prompt_files, planned, result, base_root,
                                   options)
            if watch is None:
                iteration.run(dry_run=dry_run, agent=agent)
            else:
                run_watch(watch, repo=repo, tip=base.commit, planned=planned, prompt_paths=prompt_paths,
                          screen=iteration.stage.screen, policy=settings.gate_policy, log=ctx.log)
                result.status = "watched"
                ctx.store.iterations.finish(iteration_id, "watched", iteration_summary(result))
    except (CheckoutChanged, StoreChanged):  # already recorded as stopped
        raise
    except BaseException as exc:
        record_ending(exc, lambda status, reason: ctx.store.iterations.finish(
            iteration_id, status, {"stop_reason": reason}))
        raise
    return result


@dataclass(frozen=True)
class IterationOptions:
    """How `run_iteration` was asked to run, fixed when the iteration is made."""

    search_dir: Path
    night_decisions: int | None = None
    """Inside a night, the candidates it gated before this iteration."""
    night: NightScope | None = None
    hand_edit: HandEdit | None = None


def _prepare(repo, base: gitops.Base, root: Path, settings: LoopSettings, suite_names: list[str] | None,
             agent: str | None, *, check_proposer: bool) -> tuple[list[Suite], dict[str, str]]:
    """The run's suites (with their regression suites) and each agent's prompt path in the
    repository, every input checked before anything runs."""
    suites = with_regression_suites(load_suites(suite_names or list(settings.suites), root), root)
    entries = {suite.spec.agent_name: get_agent(suite.spec.agent_name) for suite in suites}
    if agent is not None and agent not in entries:
        raise ConfigError(f"agent {agent!r} has no suite in this run (agents here: {', '.join(sorted(entries))})",
                          field="--agent", fix="name one of those agents, or add a --suite of that agent")
    prompt_paths = {name: _rel(repo, root, entry.prompt_file) for name, entry in entries.items()}
    gitops.require_files(repo, base, list(prompt_paths.values()))
    validate_model(settings.models.agent_model, field="agent_model")
    if judges_used(suites):
        validate_model(settings.models.judge_model, field="judge_model")
    if check_proposer:
        _check_proposer(settings.proposal)
    return suites, prompt_paths


def _check_proposer(settings: ProposalSettings) -> None:
    if settings.proposer == "llm":
        validate_model(settings.patcher_model, field="patcher_model")
        if settings.patcher_model.startswith("mock/patcher"):
            sim = settings.sim
            if sim.mock_patcher_script and sim.mock_patcher_skill is not None:
                raise ConfigError("mock/patcher answers from a script or by skill, not both",
                                  field="mock_patcher_skill",
                                  fix="unset mock_patcher_skill or mock_patcher_script")
            if sim.mock_patcher_skill is None and not sim.mock_patcher_script:
                raise ConfigError("mock/patcher answers from a script, and none is set", field="mock_patcher_script",
                                  fix="set mock_patcher_script (or OPTIMIZER_MOCK_PATCHER_SCRIPT) to a JSON file "
                                      "of proposals, or mock_patcher_skill for a weak patcher of mock/sim agents, "
                                      "or choose another --patcher-model")
            if sim.mock_patcher_script:
                check_patcher_script(sim.mock_patcher_script)
    make_proposer(settings)


class _Iteration:
    def __init__(self, ctx: LoopContext, settings: LoopSettings, repo, suites: list[Suite],
                 prompt_paths: dict[str, str], prompt_files: dict[str, str], planned: list[PlannedTrial],
                 result: IterationResult, base_root: Path, options: IterationOptions):
        self.ctx, self.settings, self.repo, self.suites = ctx, settings, repo, suites
        self.prompt_paths, self.prompt_files = prompt_paths, prompt_files
        self.planned, self.result = planned, result
        self.store, self.log = ctx.store, ctx.log
        self.stage = Stage(ctx, settings.runner, suites, planned, result, base_root)
        self.baseline: list[Trial] = []
        self.evidence: list[Trial] = []
        """The baseline and the other recorded trials of the base prompts (`Stage.evidence`)."""
        self.seen: dict[tuple[str, str], int] = {}
        """Per train task, the first trial index past the evidence (the gate's fresh pairs start there)."""
        self.regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
        self.policy = settings.gate_policy
        judge = settings.models.judge_model
        self.non_voting = non_voting_graders(ctx.store, suites, judge) if judges_used(suites) else []
        self.search_dir = options.search_dir
        self.adapter: ScreeningAdapter | None = None
        self.night_decisions = options.night_decisions
        """Inside a night, the candidates gated before this one (this iteration's own included)."""
        self.night = options.night
        self.hand_edit = options.hand_edit

    def run(self, *, dry_run: bool, agent: str | None) -> None:
        result, store = self.result, self.store
        self._load_evidence()
        if self.hand_edit is None:
            rejected = store.proposals.rejected()
            exhausted = self._exhausted(rejected)
            selection = self._select(agent, exhausted)
        else:  # a person's edit: no earlier proposal sets its targets aside or feeds its request
            rejected, exhausted = [], set()
            selection = self._hand_selection(self.hand_edit)
        if selection is None:
            result.status = "nothing_to_fix"
            self.log("no train trial failed: nothing to fix" if not exhausted and not result.skipped else
                     "every failing bucket already had its rejected proposals at this base, or passed its fresh "
                     "confirmation: nothing new to try")
            store.iterations.finish(result.iteration_id, "nothing_to_fix", iteration_summary(result),
                                    baseline_run_id=result.baseline_run_id)
            return
        result.selection = selection
        prompt_path = self.prompt_paths[selection.agent]
        prompt = gitops.read_at(self.repo, result.base.commit, prompt_path)
        manual = load_manual(self.ctx.project_root, selection.agent)
        self._write_request(selection, prompt, prompt_path, manual, rejected)
        if dry_run:
            result.status = "dry_run"
            store.iterations.finish(result.iteration_id, "dry_run", iteration_summary(result))
            return
        if self.hand_edit is None:
            self._propose(selection, prompt, prompt_path, manual.sha256)
        else:
            self._gate_one(HandEditProposer(self.hand_edit), selection, prompt, prompt_path,
                           LintIndex.from_suites(self.suites), manual.sha256, name=f"{selection.agent}-{PROPOSER}",
                           note="a hand edit")
        self._keep_best()
        result.status = "accepted" if result.accepted else "rejected"
        result.report_path = write_report(result)
        store.iterations.finish(result.iteration_id, result.status, iteration_summary(result))

    def _load_evidence(self) -> None:
        """The base prompts' trials the selection and the gate rest on (the baseline, the other
        recorded trials, the pool at fresh indexes), and the watch over the runs they came from."""
        for path in self.prompt_paths.values():
            if gitops.uncommitted(self.repo, path):
                self.log(f"note: {path} has uncommitted changes; the loop uses the committed version "
                         f"at {self.result.base.commit[:12]}")
        self.baseline = self.stage.baseline()
        self.evidence = self.stage.evidence(self.baseline)
        self.seen = unseen_from(self.evidence, high=SCREEN_INDEX)
        pooled = self.stage.base_pool()
        self.watch = StoreWatch(self.store, [self.result.baseline_run_id, *self.stage.sources], night=self.night)
        if pooled:
            self.log(f"base prompt: {pooled} trials at fresh indexes that earlier iterations ran on this base are "
                     f"reused")

    def _exhausted(self, rejected: list[dict[str, Any]]) -> set[tuple[str, str]]:
        """The buckets not targeted again at this base: `bucket_patience` rejected proposals, or
        searches that promoted none."""
        base = self.result.base
        exhausted = exhausted_buckets(rejected + self.store.iterations.rejected_unproposed(base.commit), base.commit,
                                      self.settings.bucket_patience)
        if exhausted:
            self.log(f"not targeted ({self.settings.bucket_patience}+ rejected proposals, or searches that promoted "
                     f"none, at this base): "
                     + ", ".join(sorted("/".join(key) for key in exhausted)))
        return exhausted

    def _write_request(self, selection: Selection, prompt: str, prompt_path: str, manual: Manual,
                       rejected: list[dict[str, Any]]) -> None:
        """`request.md` for the proposer, recorded with the targets. Its arguments but the prompt
        and the failures are kept (`request_args`): the search renders one per parent prompt."""
        result, settings = self.result, self.settings
        failures = failure_records(self.evidence, self.suites, selection)
        budget = settings.request_token_budget
        window = context_window(settings.proposal.patcher_model) if settings.proposal.proposer == "llm" else None
        if window:  # half the patcher's context: the rest holds its instructions and the answer
            budget = min(budget, window // 2)
        targets = [f"{t.suite}/{t.bucket}" for t in selection.targets]
        self.request_args = dict(selection=selection, prompt_file=prompt_path, manual=manual,
                                 iteration_id=result.iteration_id, base_commit=result.base.commit,
                                 agent_model=settings.models.agent_model, max_changed_lines=settings.max_changed_lines,
                                 token_budget=budget, non_voting=self.non_voting,
                                 judge_model=settings.models.judge_model,
                                 rejected_ideas=rejected_ideas(rejected, set(targets)),
                                 patch_format=asked_format(settings.proposal))
        request, omitted = render_request(prompt=prompt, failures=failures, **self.request_args)
        result.request_path = result.run_dir / "request.md"
        write_text(result.request_path, request)
        self.log(f"targets: {', '.join(targets)} ({len(failures)} failing task(s), {omitted} left out of the request)")
        self.log(f"request: {result.request_path}")
        self.store.iterations.set_targets(result.iteration_id, agent=selection.agent, targets=targets,
                                          baseline_run_id=result.baseline_run_id,
                                          request_path=str(result.request_path), manual_sha256=manual.sha256)

    def _propose(self, selection: Selection, prompt: str, prompt_path: str, manual_sha: str) -> None:
        """The candidates: from a search, best first until one is accepted, or `candidates`
        proposals straight to the gate."""
        proposer = make_proposer(self.settings.proposal)
        if proposer.note:
            self.log(f"note: {proposer.note}")
        lint_index = LintIndex.from_suites(self.suites)
        if self.settings.search_rollouts:
            self._search_then_gate(proposer, selection, prompt, prompt_path, lint_index, manual_sha)
            return
        candidates = self.settings.candidates
        for number in range(1, candidates + 1):
            self._gate_one(proposer, selection, prompt, prompt_path, lint_index, manual_sha,
                           name=f"{selection.agent}-{number}", note=f"{number} of {candidates} this iteration")

    def _keep_best(self) -> None:
        """Of several accepted candidates, the one that gained most on its targets stays; the
        others are superseded and their branches deleted."""
        accepted = [p for p in self.result.proposals if p.status == "accepted"]
        if len(accepted) < 2:
            return
        best = max(accepted, key=lambda p: _targeted_gain(p.decision))
        for other in accepted:
            if other is not best:
                other.status, other.reason = "superseded", f"accepted, but {best.branch} gained more"
                gitops.delete_branch(self.repo, other.branch)
                self.store.proposals.set_status(other.proposal_id, other.status, other.reason)

    def _gate_one(self, proposer, selection: Selection, prompt: str, prompt_path: str, lint_index: LintIndex,
                  manual_sha: str, *, name: str, note: str) -> ProposalRecord:
        """One proposal from `proposer` through the checks and the gate, recorded."""
        result, store = self.result, self.store
        branch = f"optimizer/{result.iteration_id}/{name}"
        record = ProposalRecord(ordinal=len(store.proposals.rows()) + 1, branch=branch, status="running", reason="")
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
        store_proposal(store, result, record, selection.agent, proposer.name, self.settings.proposal, manual_sha)
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
        prefer_named = prefers_named(self.settings.target_order, self.settings.models.agent_model)
        while True:
            selection = select_targets(self.evidence, self.suites, max_targets=self.settings.target_buckets,
                                       agent=agent, skip=skip, prefer_named=prefer_named)
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

    @property
    def _size_limit(self) -> int:
        """Changed lines a patch may have (`max_changed_lines`); a hand edit has no limit."""
        return self.settings.max_changed_lines if self.hand_edit is None else HAND_EDIT_LINES

    def _hand_selection(self, edit: HandEdit) -> Selection | None:
        path = self.prompt_paths[edit.agent]
        diff = text_diff(self._base_prompt(edit.agent), edit.text, path)
        selection, how = hand_selection(edit, diff, self.evidence, self.suites,
                                        max_targets=self.settings.target_buckets)
        if selection is not None:
            self.log(f"the hand edit's targets ({how}): "
                     + ", ".join(f"{t.suite}/{t.bucket}" for t in selection.targets))
        return selection

    def _base_prompt(self, agent: str) -> str:
        return gitops.read_at(self.repo, self.result.base.commit, self.prompt_paths[agent])

    def _adapter(self, selection: Selection) -> ScreeningAdapter:
        """The iteration's screening adapter (one per iteration: its trial indexes never repeat)."""
        if self.adapter is None:
            items = {(item.suite.name, item.task.id): item for item in self.planned
                     if item.task.split == "train" and item.suite.spec.agent_name == selection.agent}
            self.adapter = ScreeningAdapter(items, lambda planned, prompt, label: self.stage.screen(
                planned, selection.agent, prompt, label), targets=set(), failures=lambda trials: [])
            self.adapter.set_adapter_state({"next_index": {"/".join(key): index for key, index in unseen_from(
                self.evidence, low=SCREEN_INDEX).items()}})
        return self.adapter

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

        check = self._text_check(prompt, prompt_path, lint_index)

        def render(parent: str, failures: list[dict[str, Any]]) -> str:
            return render_request(prompt=parent, failures=failures, **self.request_args)[0]

        search_proposer = SearchProposer(
            adapter, render=render, check=check, diff=lambda text: text_diff(prompt, text, prompt_path),
            propose=lambda path, parent, number: self._search_proposal(proposer, selection, path, parent, number,
                                                                       prompt_path, check, manual_sha),
            records=records, folder=folder, log=self.log)
        train, val = screening_sets(self.planned, targets, selection.agent, settings.search_rollouts)
        self.log(f"search: {settings.search_rollouts} screening trials on gepa ({len(train)} minibatch tasks, "
                 f"{len(val)} screening tasks), pool {folder}")
        outcome = run_search(adapter, search_proposer, base_prompt=prompt, train=train, val=val,
                             budget=settings.search_rollouts, folder=folder, seed=settings.models.seed,
                             promote=min(PROMOTE, settings.candidates), iteration=result.iteration_id,
                             resumes=[job["iteration_id"] for job in self.stage.interrupted])
        result.search = outcome
        self.log(f"search: {len(outcome.candidates)} candidate(s), {len(outcome.promoted)} promoted "
                 f"(base prompt screened at {outcome.base_score:.2f})")
        for rank, candidate in enumerate(outcome.promoted, 1):
            judged = selection
            if candidate.gate_targets:
                judged = replace(selection, targets=[t for t in selection.targets
                                                     if f"{t.suite}/{t.bucket}" in candidate.gate_targets])
            record = self._gate_one(FixedProposer(proposer, candidate.text, candidate.rationale), judged, prompt,
                                    prompt_path, lint_index, manual_sha, name=f"{selection.agent}-{rank}",
                                    note=f"search candidate {candidate.number}, promoted {rank} of {len(outcome.promoted)}")
            candidate.status, candidate.branch = record.status, record.branch
            candidate.reason = f"gate: {record.reason}"
            candidate.failed_rules = [rule.rule for rule in record.decision.rules if not rule.passed] \
                if record.decision else []
            save_search(result, outcome)
            if record.status == "accepted":
                for later in outcome.promoted[rank:]:
                    later.status, later.reason = "not_promoted", f"{record.branch} was accepted first"
                break
        save_search(result, outcome)

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
            self.watch.renew()
            proposal = proposer.propose(ProposalRequest(
                request=request_path.read_text(encoding="utf-8"), request_path=request_path, prompt_file=prompt_path,
                workdir=box.workdir, ordinal=number, check=check, box=box, sample=True,
                examples=self._examples(selection, parent, prompt_path, number - 1)))
            patched = target.read_text(encoding="utf-8") if target.is_file() else None
        self._keep_log(request_path.with_name(f"proposal-{number}.log"), proposal, proposer)
        changed = changes(before, checkout_state(self.repo))
        if changed:
            record = ProposalRecord(ordinal=len(self.store.proposals.rows()) + 1, branch=branch, status="stopped",
                                    reason=stop_message(changed), rationale=proposal.rationale, usage=proposal.usage)
            result.proposals.append(record)
            store_proposal(self.store, result, record, selection.agent, proposer.name, self.settings.proposal,
                           manual_sha)
            self._stop(record, confined=proposer.confined)
        self._check_store("while the proposer ran", confined=proposer.confined)
        return (None if proposal.error else patched), proposal.rationale, proposal.error

    def _keep_log(self, path: Path, proposal: Proposal, proposer) -> None:
        """The proposer's log beside its request; a proposer command that failed also gets the end
        of it on the console, where the reason usually is (`command not found`, a missing key)."""
        if not proposal.log:
            return
        write_text(path, proposal.log)
        if proposal.error and proposer.name == "command":
            tail = proposal.log.rstrip().splitlines()[-LOG_TAIL_LINES:]
            self.log("\n".join([f"{proposal.error}; the end of its log ({path}):", *("  " + line for line in tail)]))

    def _text_check(self, prompt: str, prompt_path: str, lint_index: LintIndex) -> Callable[[str], str | None]:
        """The checks a patched prompt text meets before any rollout (size, hard-coded answers), as
        the proposers' `check`: None when it passes, else `rule: reason`."""

        def check(patched: str) -> str | None:
            found = check_prompt_text(prompt_file=prompt_path, base_prompt=prompt, patched=patched,
                                      max_changed_lines=self._size_limit, index=lint_index)
            return None if found.passed else f"{found.rule}: {found.reason}"

        return check

    def _stop(self, record: ProposalRecord, *, confined: bool) -> None:
        """End the iteration on a proposer that changed the user's checkout: recorded as stopped,
        then raised, so `run` and `nightly` exit with the harness code (3), not a verdict."""
        result = self.result
        result.status = "stopped"
        result.report_path = write_report(result)
        self.store.iterations.finish(result.iteration_id, "stopped", iteration_summary(result))
        fix = ("the proposer could not write there, so if you changed the checkout yourself meanwhile, run again"
               if confined else
               "confine the proposer with bubblewrap (the note at the start of the run says why it was not)")
        raise CheckoutChanged(record.reason, path=self.repo.working_tree_dir,
                              fix=f"undo those changes by hand (they are still there; nothing was merged) and check "
                                  f"the proposer; {fix}")

    def _check_store(self, when: str, *, confined: bool) -> None:
        """Stop the iteration, recorded as stopped, when the completed runs it rests on changed in
        the store (`StoreWatch`): only a process outside the harness writes to those."""
        try:
            self.watch.check(when, confined=confined)
        except StoreChanged as exc:
            self.result.status = "stopped"
            self.store.iterations.finish(self.result.iteration_id, "stopped", {"stop_reason": exc.message})
            raise

    def _proposal(self, proposer, record: ProposalRecord, box: Box, selection: Selection, prompt: str,
                  prompt_path: str, lint_index: LintIndex) -> None:
        result, base, workdir = self.result, self.result.base, box.workdir
        check = self._text_check(prompt, prompt_path, lint_index)
        before = checkout_state(self.repo)
        self.watch.renew()
        proposal: Proposal = proposer.propose(ProposalRequest(
            request=result.request_path.read_text(encoding="utf-8"), request_path=result.request_path,
            prompt_file=prompt_path, workdir=workdir, ordinal=record.ordinal, check=check, box=box,
            sample=self.settings.candidates > 1,
            examples=self._examples(selection, prompt, prompt_path, len(result.proposals) - 1)))
        record.rationale, record.usage = proposal.rationale, proposal.usage
        self._keep_log(result.run_dir / f"proposal-{record.ordinal}.log", proposal, proposer)
        changed = changes(before, checkout_state(self.repo))
        if changed:  # checked before any git command of ours reads the user's (maybe changed) config
            record.status, record.reason = "stopped", stop_message(changed)
            return
        self._check_store("while the proposer ran", confined=proposer.confined)
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
                             max_changed_lines=self._size_limit, index=lint_index)
        if not found.passed:
            record.status, record.reason = "rejected_check", f"{found.rule}: {found.reason}"
            return
        change = self._ablate(selection, prompt, prompt_path, change, workdir, record)
        headline = f"{selection.agent}: prompt patch for {', '.join(t.bucket for t in selection.targets)}"
        request = shown_path(result.request_path, Path(self.repo.working_tree_dir),
                             self.ctx.project_root / self.settings.state_dir)
        record.commit_sha = gitops.commit_change(self.repo, record.branch, base.commit, change.tree,
                                                 commit_message(selection, None, record, result, headline=headline,
                                                                request=request))
        with tempfile.TemporaryDirectory(prefix="optimizer-candidate-") as folder:
            decision = self._compare(record, selection,
                                     export_prompts(self.repo, record.commit_sha, self.prompt_files, Path(folder)))
        self._check_store("before the gate decided", confined=proposer.confined)
        record.decision = decision
        record.status = "accepted" if decision.accepted else "rejected_gate"
        record.reason = decision.summary
        record.commit_sha = gitops.commit_change(self.repo, record.branch, base.commit, change.tree,
                                                 commit_message(selection, decision, record, result,
                                                                headline=headline, request=request))
        write_json(result.run_dir / f"decision-{record.ordinal}.json", decision.as_dict())

    def _examples(self, selection: Selection, prompt: str, prompt_path: str, skip: int) -> list[Example]:
        """The worked examples a proposal in the `example` format may add to `prompt` (none in
        another format), the `skip`-th first (`optimizer.proposal.examples`)."""
        if patch_format(self.settings.proposal) != "example":
            return []
        template = template_path(Path(self.repo.working_tree_dir) / prompt_path)
        if not template.is_file():
            raise ConfigError(f"patch_format = example needs {template.name} beside {prompt_path}: the wording of a "
                              f"worked example", field="patch_format",
                              fix=f"write {template.name} with {{note}} and {{calls}}, or choose another patch_format")
        suites = [suite for suite in self.suites if suite.spec.agent_name == selection.agent]
        chosen = choose_examples(suites, [(t.suite, t.bucket) for t in selection.targets], self.baseline, prompt,
                                 template.read_text(encoding="utf-8"))
        skip = skip % len(chosen) if chosen else 0
        return chosen[skip:] + chosen[:skip]

    def _shown(self, agent: str, prompt_root: Path) -> set[tuple[str, str]]:
        """The (suite, task) of the agent's tasks whose whole input its base or candidate prompt
        shows: worked examples, never counted in the gate's pairs."""
        suites = [suite for suite in self.suites if suite.spec.agent_name == agent]
        index = LintIndex.from_suites(suites)
        texts = gitops.read_at(self.repo, self.result.base.commit, self.prompt_paths[agent]) + "\n" + \
            (prompt_root / get_agent(agent).prompt_file).read_text(encoding="utf-8")
        ids = index.shown(texts)
        return {(suite.name, task.id) for suite in suites for task in suite.tasks if task.id in ids}

    def _ablate(self, selection: Selection, prompt: str, prompt_path: str, change, workdir: Path,
                record: ProposalRecord):
        """The change less the parts that did nothing for the targets (`optimizer.proposal.ablation`),
        made again from the box; the change as it was when nothing is dropped. A change that shows
        a worked example is judged whole: its lines are one example, not parts."""
        trials = self.settings.ablation_trials
        if not trials or self.hand_edit is not None:  # a person's edit is judged whole
            return change
        patched_text = gitops.file_at(self.repo, change.tree, prompt_path).decode("utf-8")
        if LintIndex.from_suites(self.suites).shown(patched_text) - LintIndex.from_suites(self.suites).shown(prompt):
            self.log("ablation: none, the patch adds a worked example (judged whole)")
            return change
        targets = {(t.suite, t.bucket) for t in selection.targets}
        buckets: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for item in self.planned:
            if item.task.split == "train" and (item.suite.name, item.task.bucket) in targets:
                buckets.setdefault((item.suite.name, item.task.bucket), set()).add((item.suite.name, item.task.id))
        if not buckets:
            return change
        adapter = self._adapter(selection)
        spread = [tasks[n % len(tasks)] for tasks in map(sorted, buckets.values())
                  for n in range(max(trials, len(tasks)))]  # `trials` per targeted bucket

        def score(text: str, label: str) -> dict[str, list[tuple[float, float]]]:
            by_bucket: dict[str, list[tuple[float, float]]] = {}
            for trial in adapter.trials(spread, text, label):
                by_bucket.setdefault(f"{trial.suite}/{trial.bucket}", []).append(
                    (trial_value(trial.score, trial.status), float(trial.status == "passed")))
            return by_bucket

        patched = gitops.file_at(self.repo, change.tree, prompt_path).decode("utf-8")  # the checks found a text file
        ablation = ablate(prompt, patched, score, kept_file=self.search_dir / "ablation" / (
            text_sha("\0".join([prompt, patched, repr(sorted(buckets)), str(trials)])) + ".json"))
        if ablation is None:
            return change
        self.log(f"ablation: {ablation.summary()}")
        if not ablation.dropped:
            return change
        (workdir / prompt_path).write_text(ablation.text, encoding="utf-8")
        record.rationale = f"{record.rationale}\n\n[optimizer] {ablation.summary()}".strip()
        change = gitops.final_change(self.repo, workdir, self.result.base.commit)
        record.diff = change.diff
        return change

    def _compare(self, record: ProposalRecord, selection: Selection, prompt_root: Path) -> Decision:
        """The candidate (its prompts under `prompt_root`) against the base, recorded in a run of its own."""
        result = self.result
        targets = {(t.suite, t.bucket) for t in selection.targets}
        asked = {(t.suite, t.bucket) for t in result.selection.targets}
        record.candidate_run_id = run_id = new_run_id()
        sides = LoopSides(self.stage, prompt_root, run_id)
        policy = self.policy
        if self.night_decisions is not None:
            self.night_decisions += 1
            policy = replace(policy, alpha=decision_alpha(self.policy.alpha, self.settings.night_alpha,
                                                          self.night_decisions))
            self.log(f"gate: decision {self.night_decisions} of the night, improvement test at "
                     f"alpha {policy.alpha:.4f}")
        shown = self._shown(selection.agent, prompt_root)
        if shown:
            self.log(f"gate: {len(shown)} task(s) left out of the pairs, their input shown in the prompt as a "
                     f"worked example: {', '.join('/'.join(key) for key in sorted(shown))}")
        comparison = compare(sides, planned=[item for item in self.planned if (item.suite.name, item.task.id) not in shown],
                             baseline=[trial for trial in self.baseline if (trial.suite, trial.task_id) not in shown],
                             targets=targets, agent=selection.agent, regression_suites=self.regression, policy=policy,
                             non_voting=self.non_voting, log=self.log, seen=self.seen,
                             named=buckets_named(record.diff, self.planned, selection.agent, asked))
        decision = comparison.decision
        decision.shown_tasks = sorted("/".join(key) for key in shown)
        record.batches = comparison.batches
        record.rollouts, record.model_rollouts = sides.ran(), sides.model_calls
        result.rollouts += sides.candidate_count
        result.model_rollouts += sides.candidate_model_calls
        record.candidate_run_id = run_id = sides.run_id
        run = sides.result(self.settings.runner)
        if decision.stage != "targeted":  # other agents' suites: their prompts did not change
            recorded = self.store.trials.recorded(run_id)
            for trial in self.baseline:
                if self._agent_of(trial.suite) != selection.agent:
                    if (trial.suite, trial.task_id, trial.index) not in recorded:
                        self.store.trials.record(run_id, trial)
                    run.trials.append(trial)
        if self.store.runs.exists(run_id):
            finish(run, self.store)
        return decision

    def _agent_of(self, suite_name: str) -> str:
        return next(suite.spec.agent_name for suite in self.suites if suite.name == suite_name)


def _targeted_gain(decision: Decision | None) -> float:
    if decision is None:
        return float("-inf")
    return sum(bucket.change for bucket in decision.buckets if bucket.targeted)

