"""One candidate through the loop: its proposal in a box, the checks, the ablation of its parts,
its commit and the gate's comparison with the base prompt, recorded (`Candidates.gate_one`); and
of several accepted candidates, the one kept (`Candidates.keep_best`)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable

from optimizer import gitops
from optimizer.comparison.compare import buckets_named, compare
from optimizer.errors import ConfigError
from optimizer.files import shown_path, write_json
from optimizer.gate import Decision
from optimizer.loop.checkout_state import changes, checkout_state, stop_message
from optimizer.loop.records import ProposalRecord, store_proposal
from optimizer.loop.render import commit_message
from optimizer.loop.staging import LoopSides, export_prompts
from optimizer.loop.state import IterationState
from optimizer.nightly.spending import decision_alpha
from optimizer.proposal.ablation import ablate
from optimizer.proposal.anchors import Anchor, read_placeholder
from optimizer.proposal.anchors import find as find_anchors
from optimizer.proposal.box import Box, open_box
from optimizer.proposal.examples import Example, template_path
from optimizer.proposal.examples import choose as choose_examples
from optimizer.proposal.patch import LintIndex, check_change, check_prompt_text
from optimizer.proposal.proposers import Proposal, ProposalRequest, patch_format
from optimizer.proposal.request import Selection
from optimizer.proposal.screening import text_sha
from optimizer.registry import get_agent
from optimizer.scoring import voting_passed, voting_value
from optimizer.trials.evaluate import finish
from optimizer.trials.runner import new_run_id
from optimizer.types import Task


ABLATION_NOTE = "\n\n[optimizer] "
"""What precedes the ablation's summary where it is added to a proposal's rationale."""


class Candidates:
    def __init__(self, state: IterationState):
        self.state = state

    def gate_one(self, proposer, selection: Selection, prompt: str, prompt_path: str, lint_index: LintIndex,
                 manual_sha: str, *, name: str, note: str) -> ProposalRecord:
        """One proposal from `proposer` through the checks and the gate, recorded."""
        result, store = self.state.result, self.state.store
        branch = f"optimizer/{result.iteration_id}/{name}"
        record = ProposalRecord(ordinal=len(store.proposals.rows()) + 1, branch=branch, status="running", reason="")
        result.proposals.append(record)
        self.state.log(f"proposal {record.ordinal} ({note}) on {branch} ({proposer.name} proposer)")
        try:
            with open_box(self.state.repo, branch=branch, base_commit=result.base.commit,
                          parent=self.state.ctx.project_root / self.state.settings.state_dir / "boxes") as box:
                self._proposal(proposer, record, box, selection, prompt, prompt_path, lint_index)
        except BaseException:
            gitops.delete_branch(self.state.repo, branch)
            raise
        if record.status not in ("accepted", "stopped"):  # stopped: run no git in a changed repository
            gitops.delete_branch(self.state.repo, branch)
        store_proposal(store, result, record, selection.agent, proposer.name, self.state.settings.proposal, manual_sha)
        detail = record.reason.removeprefix("accepted: ").removeprefix("rejected: ")
        self.state.log(f"proposal {record.ordinal}: {record.status}: {detail}")
        if record.status == "stopped":
            self.state.stop(record, confined=proposer.confined)
        return record

    def keep_best(self) -> None:
        """Of several accepted candidates, the one that gained most on its targets stays; the
        others are superseded and their branches deleted."""
        accepted = [p for p in self.state.result.proposals if p.status == "accepted"]
        if len(accepted) < 2:
            return
        best = max(accepted, key=lambda p: _targeted_gain(p.decision))
        for other in accepted:
            if other is not best:
                other.status, other.reason = "superseded", f"accepted, but {best.branch} gained more"
                gitops.delete_branch(self.state.repo, other.branch)
                self.state.store.proposals.set_status(other.proposal_id, other.status, other.reason)

    def _proposal(self, proposer, record: ProposalRecord, box: Box, selection: Selection, prompt: str,
                  prompt_path: str, lint_index: LintIndex) -> None:
        state = self.state
        result, base, workdir = state.result, state.result.base, box.workdir
        check = self.text_check(prompt, prompt_path, lint_index)
        before = checkout_state(self.state.repo)
        self.state.watch.renew()
        proposal: Proposal = proposer.propose(ProposalRequest(
            request=result.request_path.read_text(encoding="utf-8"), request_path=result.request_path,
            prompt_file=prompt_path, workdir=workdir, ordinal=record.ordinal, check=check, box=box,
            sample=self.state.settings.candidates > 1,
            prepared=self.prepared(selection, prompt, prompt_path, len(result.proposals) - 1)))
        record.rationale, record.usage = proposal.rationale, proposal.usage
        self.state.keep_log(result.run_dir / f"proposal-{record.ordinal}.log", proposal, proposer)
        changed = changes(before, checkout_state(self.state.repo))
        if changed:  # checked before any git command of ours reads the user's (maybe changed) config
            record.status, record.reason = "stopped", stop_message(changed)
            return
        self.state.check_store("while the proposer ran", confined=proposer.confined)
        try:
            change = gitops.final_change(self.state.repo, workdir, base.commit)
        except gitops.WorktreeError as exc:
            record.status, record.reason = ("no_patch", proposal.error) if proposal.error else \
                ("rejected_check", f"unreadable: {exc.message}")
            return
        record.diff = change.diff
        if proposal.error:  # a proposer that failed or timed out: what it left in its clone is not used
            record.status, record.reason = "no_patch", proposal.error
            return
        found = check_change(changed_files=change.files, allowed_file=prompt_path, base_prompt=prompt,
                             patched=gitops.file_at(self.state.repo, change.tree, prompt_path), diff=change.diff,
                             max_changed_lines=self.state.size_limit, index=lint_index)
        if not found.passed:
            record.status, record.reason = "rejected_check", f"{found.rule}: {found.reason}"
            return
        if judged := self._judged_before(change.diff):
            record.status, record.reason = "rejected_check", judged
            return
        change = self._ablate(selection, prompt, prompt_path, change, workdir, record, lint_index)
        headline = f"{selection.agent}: prompt patch for {', '.join(t.bucket for t in selection.targets)}"
        request = shown_path(result.request_path, Path(self.state.repo.working_tree_dir),
                             self.state.ctx.project_root / self.state.settings.state_dir)
        record.commit_sha = gitops.commit_change(self.state.repo, record.branch, base.commit, change.tree,
                                                 commit_message(selection, None, record, result, headline=headline,
                                                                request=request))
        with tempfile.TemporaryDirectory(prefix="optimizer-candidate-") as folder:
            decision = self._compare(record, selection,
                                     export_prompts(state.repo, record.commit_sha, state.prompt_files, Path(folder)),
                                     prompt, lint_index)
        self.state.check_store("before the gate decided", confined=proposer.confined)
        record.decision = decision
        record.status = "accepted" if decision.accepted else "rejected_gate"
        record.reason = decision.summary
        record.commit_sha = gitops.commit_change(self.state.repo, record.branch, base.commit, change.tree,
                                                 commit_message(selection, decision, record, result,
                                                                headline=headline, request=request))
        write_json(result.run_dir / f"decision-{record.ordinal}.json", decision.as_dict())

    def text_check(self, prompt: str, prompt_path: str, lint_index: LintIndex) -> Callable[[str], str | None]:
        """The checks a patched prompt text meets before any rollout (size, hard-coded answers), as
        the proposers' `check`: None when it passes, else `rule: reason`."""

        def check(patched: str) -> str | None:
            found = check_prompt_text(prompt_file=prompt_path, base_prompt=prompt, patched=patched,
                                      max_changed_lines=self.state.size_limit, index=lint_index)
            return None if found.passed else f"{found.rule}: {found.reason}"

        return check

    def prepared(self, selection: Selection, prompt: str, prompt_path: str, skip: int) -> list[Example | Anchor]:
        """The patches made without the patcher that a proposal in the `example` format may make
        to `prompt` (none in another format), the `skip`-th first: answers the prompt shows
        (`optimizer.proposal.anchors`), then worked examples (`optimizer.proposal.examples`)."""
        if patch_format(self.state.settings.proposal) != "example":
            return []
        prompt_file = Path(self.state.repo.working_tree_dir) / prompt_path
        template = template_path(prompt_file)
        if not template.is_file():
            raise ConfigError(f"patch_format = example needs {template.name} beside {prompt_path}: the wording of a "
                              f"worked example", field="patch_format",
                              fix=f"write {template.name} with {{note}} and {{calls}}, or choose another patch_format")
        suites = [suite for suite in self.state.suites if suite.spec.agent_name == selection.agent]
        targets = [(t.suite, t.bucket) for t in selection.targets]
        anchors = find_anchors(self.state.baseline, self.state.lint_index, prompt, targets,
                               {task.id for suite in suites for task in suite.tasks}, read_placeholder(prompt_file))
        demonstrate = get_agent(selection.agent).demonstrate or Task.reference_calls
        judged = judged_rationales(self.state.rejected, self.state.result.base.commit)
        chosen = [patch for patch in anchors + choose_examples(suites, targets, self.state.baseline, prompt,
                                                               template.read_text(encoding="utf-8"), demonstrate)
                  if patch.rationale() not in judged]
        skip = skip % len(chosen) if chosen else 0
        return chosen[skip:] + chosen[:skip]

    def _judged_before(self, diff: str) -> str:
        """Why a patch the gate already rejected at this base is not judged again (a proposer
        with one worked example to show proposes it every time); "" for a new patch. Judging it
        again would spend a share of the night's error budget on a known answer."""
        same = next((row for row in rejected_at(self.state.rejected, self.state.result.base.commit)
                     if row["diff"] == diff), None)
        return f"already judged: the same patch as proposal {same['id']}, rejected at this base" if same else ""

    def _shown(self, agent: str, prompt: str, prompt_root: Path, index: LintIndex) -> set[tuple[str, str]]:
        """The (suite, task) of the agent's tasks whose whole input its base prompt (`prompt`) or
        candidate prompt shows: worked examples, never counted in the gate's pairs."""
        ids = index.shown(prompt + "\n" + (prompt_root / get_agent(agent).prompt_file).read_text(encoding="utf-8"))
        return {(suite.name, task.id) for suite in self.state.suites if suite.spec.agent_name == agent
                for task in suite.tasks if task.id in ids}

    def _ablate(self, selection: Selection, prompt: str, prompt_path: str, change, workdir: Path,
                record: ProposalRecord, index: LintIndex):
        """The change less the parts that did nothing for the targets (`optimizer.proposal.ablation`),
        made again from the box; the change as it was when nothing is dropped. A change that shows
        a worked example is judged whole: its lines are one example, not parts."""
        trials = self.state.settings.ablation_trials
        if not trials or self.state.hand_edit is not None:  # a person's edit is judged whole
            return change
        patched = gitops.file_at(self.state.repo, change.tree, prompt_path).decode("utf-8")  # checked as text
        if index.shown(patched) - index.shown(prompt):
            self.state.log("ablation: none, the patch adds a worked example (judged whole)")
            return change
        targets = {(t.suite, t.bucket) for t in selection.targets}
        buckets: dict[tuple[str, str], set[tuple[str, str]]] = {}
        for item in self.state.planned:
            if item.task.split == "train" and (item.suite.name, item.task.bucket) in targets:
                buckets.setdefault((item.suite.name, item.task.bucket), set()).add((item.suite.name, item.task.id))
        if not buckets:
            return change
        adapter = self.state.screening_adapter(selection)
        spread = [tasks[n % len(tasks)] for tasks in map(sorted, buckets.values())
                  for n in range(max(trials, len(tasks)))]  # `trials` per targeted bucket

        non_voting = frozenset(self.state.non_voting)

        def score(text: str, label: str) -> dict[str, list[tuple[float, float]]]:
            """Per targeted bucket, each trial's value and verdict as the gate reads them (the judges
            that do not vote left out; a trial with no voting score counts 0)."""
            by_bucket: dict[str, list[tuple[float, float]]] = {}
            for trial in adapter.trials(spread, text, label):
                value = voting_value(trial, non_voting)
                by_bucket.setdefault(f"{trial.suite}/{trial.bucket}", []).append(
                    (0.0 if value is None else value, float(voting_passed(trial, non_voting))))
            return by_bucket

        ablation = ablate(prompt, patched, score, kept_file=self.state.search_dir / "ablation" / (
            text_sha("\0".join([prompt, patched, repr(sorted(buckets)), str(trials)])) + ".json"))
        if ablation is None:
            return change
        self.state.log(f"ablation: {ablation.summary()}")
        if not ablation.dropped:
            return change
        (workdir / prompt_path).write_text(ablation.text, encoding="utf-8")
        record.rationale = f"{record.rationale}{ABLATION_NOTE}{ablation.summary()}".strip()
        change = gitops.final_change(self.state.repo, workdir, self.state.result.base.commit)
        record.diff = change.diff
        return change

    def _compare(self, record: ProposalRecord, selection: Selection, prompt_root: Path, prompt: str,
                 index: LintIndex) -> Decision:
        """The candidate (its prompts under `prompt_root`) against the base (`prompt` is the base
        prompt of the changed agent), recorded in a run of its own."""
        result = self.state.result
        targets = {(t.suite, t.bucket) for t in selection.targets}
        asked = {(t.suite, t.bucket) for t in result.selection.targets}
        record.candidate_run_id = run_id = new_run_id()
        sides = LoopSides(self.state.stage, prompt_root, run_id)
        policy = self.state.policy
        if self.state.night_decisions is not None:
            self.state.night_decisions += 1
            policy = replace(policy, alpha=decision_alpha(self.state.policy.alpha, self.state.settings.night_alpha,
                                                          self.state.night_decisions))
            self.state.log(f"gate: decision {self.state.night_decisions} of the night, improvement test at "
                           f"alpha {policy.alpha:.4f}")
        shown = self._shown(selection.agent, prompt, prompt_root, index)
        if shown:
            self.state.log(f"gate: {len(shown)} task(s) left out of the pairs, their input shown in the prompt as a "
                           f"worked example: {', '.join('/'.join(key) for key in sorted(shown))}")
        state = self.state
        planned = [item for item in state.planned if (item.suite.name, item.task.id) not in shown]
        baseline = [trial for trial in state.baseline if (trial.suite, trial.task_id) not in shown]
        comparison = compare(sides, planned=planned, baseline=baseline,
                             targets=targets, agent=selection.agent, regression_suites=state.regression, policy=policy,
                             non_voting=self.state.non_voting, log=self.state.log, seen=self.state.seen,
                             named=buckets_named(record.diff, self.state.planned, selection.agent, asked))
        decision = comparison.decision
        decision.shown_tasks = sorted("/".join(key) for key in shown)
        record.batches = comparison.batches
        record.rollouts, record.model_rollouts = sides.ran(), sides.model_calls
        result.rollouts += sides.candidate_count
        result.model_rollouts += sides.candidate_model_calls
        record.candidate_run_id = run_id = sides.run_id
        run = sides.result(self.state.settings.runner)
        if decision.stage != "targeted":  # other agents' suites: their prompts did not change
            recorded = self.state.store.trials.recorded(run_id)
            for trial in self.state.baseline:
                if self.state.agent_of(trial.suite) != selection.agent:
                    if (trial.suite, trial.task_id, trial.index) not in recorded:
                        self.state.store.trials.record(run_id, trial)
                    run.trials.append(trial)
        if self.state.store.runs.exists(run_id):
            finish(run, self.state.store)
        return decision


def _targeted_gain(decision: Decision | None) -> float:
    if decision is None:
        return float("-inf")
    return sum(bucket.change for bucket in decision.buckets if bucket.targeted)


def rejected_at(rejected: list[dict], base: str) -> list[dict]:
    """The proposals (rows of `store.proposals.rejected`) the gate rejected at `base`."""
    return [row for row in rejected if row["base_commit"] == base and row["status"] == "rejected_gate"]


def judged_rationales(rejected: list[dict], base: str) -> set[str]:
    """The rationales of the proposals the gate rejected at `base`, without the ablation's note: a
    prepared patch says what it is in its rationale, the same each time it is made, so one
    already judged is not offered again and the next iteration on the bucket gets the next one
    (or none, and the targeting moves on) rather than the same patch, refused as already judged."""
    return {(row["rationale"] or "").split(ABLATION_NOTE)[0] for row in rejected_at(rejected, base)}
