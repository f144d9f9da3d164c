"""The search step of an iteration (`search_rollouts` > 0): gepa's search over the targets on
screening trials, each of its proposals made in a box of its own, then the gate for the promoted
candidates, best first, until one is accepted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from optimizer.loop.checkout_state import changes, checkout_state, stop_message
from optimizer.loop.records import ProposalRecord, save_search, store_proposal
from optimizer.loop.state import IterationState
from optimizer.proposal.box import open_box
from optimizer.proposal.diffs import unified as text_diff
from optimizer.proposal.patch import LintIndex
from optimizer.proposal.proposers import FixedProposer, ProposalRequest, patch_format
from optimizer.proposal.request import Selection, render_request, request_failures
from optimizer.proposal.pool import PROMOTE, load_records, pool_folder
from optimizer.proposal.screening import screening_sets
from optimizer.proposal.search import SearchProposer, run_search


class Search:
    def __init__(self, state: IterationState, candidates):
        self.state, self.candidates = state, candidates

    def search_then_gate(self, proposer, selection: Selection, prompt: str, prompt_path: str,
                         lint_index: LintIndex, manual_sha: str) -> None:
        """gepa's search over the targets for `search_rollouts` trials, then the gate for the
        promoted candidates, best first, until one is accepted."""
        result, settings = self.state.result, self.state.settings
        targets = {(t.suite, t.bucket) for t in selection.targets}
        adapter = self.state.screening_adapter(selection)
        adapter.targets = targets
        adapter.failures = lambda trials: request_failures(trials, self.state.suites, selection,
                                                           patch_format(settings.proposal))
        folder = pool_folder(self.state.search_dir, selection.agent, prompt, targets)
        records = load_records(folder)
        if records:
            self.state.log(f"search: continuing the pool in {folder} ({len(records)} candidate(s) so far)")

        check = self.candidates.text_check(prompt, prompt_path, lint_index)

        def render(parent: str, failures: list[dict[str, Any]]) -> str:
            return render_request(prompt=parent, failures=failures, **self.state.request_args)[0]

        search_proposer = SearchProposer(
            adapter, render=render, check=check, diff=lambda text: text_diff(prompt, text, prompt_path),
            propose=lambda path, parent, number: self._search_proposal(proposer, selection, path, parent, number,
                                                                       prompt_path, check, manual_sha),
            records=records, folder=folder, log=self.state.log)
        train, val = screening_sets(self.state.planned, targets, selection.agent, settings.search_rollouts)
        self.state.log(f"search: {settings.search_rollouts} screening trials on gepa ({len(train)} minibatch tasks, "
                       f"{len(val)} screening tasks), pool {folder}")
        outcome = run_search(adapter, search_proposer, base_prompt=prompt, train=train, val=val,
                             budget=settings.search_rollouts, folder=folder, seed=settings.models.seed,
                             promote=min(PROMOTE, settings.candidates), iteration=result.iteration_id,
                             resumes=[job["iteration_id"] for job in self.state.stage.interrupted])
        result.search = outcome
        self.state.log(f"search: {len(outcome.candidates)} candidate(s), {len(outcome.promoted)} promoted "
                       f"(base prompt screened at {outcome.base_score:.2f})")
        for rank, candidate in enumerate(outcome.promoted, 1):
            judged = selection
            if candidate.gate_targets:
                judged = replace(selection, targets=[t for t in selection.targets
                                                     if f"{t.suite}/{t.bucket}" in candidate.gate_targets])
            fixed = FixedProposer(proposer, candidate.text, candidate.rationale)
            record = self.candidates.gate_one(fixed, judged, prompt, prompt_path, lint_index, manual_sha,
                                              name=f"{selection.agent}-{rank}",
                                              note=f"search candidate {candidate.number}, promoted {rank} of "
                                                   f"{len(outcome.promoted)}")
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
        result = self.state.result
        branch = f"optimizer/{result.iteration_id}/search-{number}"
        before = checkout_state(self.state.repo)
        with open_box(self.state.repo, branch=branch, base_commit=result.base.commit,
                      parent=self.state.ctx.project_root / self.state.settings.state_dir / "boxes") as box:
            target = box.workdir / prompt_path
            target.write_text(parent, encoding="utf-8")
            self.state.watch.renew()
            proposal = proposer.propose(ProposalRequest(
                request=request_path.read_text(encoding="utf-8"), request_path=request_path, prompt_file=prompt_path,
                workdir=box.workdir, ordinal=number, check=check, box=box, sample=True,
                prepared=self.candidates.prepared(selection, parent, prompt_path, number - 1)))
            patched = target.read_text(encoding="utf-8") if target.is_file() else None
        self.state.keep_log(request_path.with_name(f"proposal-{number}.log"), proposal, proposer)
        changed = changes(before, checkout_state(self.state.repo))
        if changed:
            record = ProposalRecord(ordinal=len(self.state.store.proposals.rows()) + 1, branch=branch, status="stopped",
                                    reason=stop_message(changed), rationale=proposal.rationale, usage=proposal.usage)
            result.proposals.append(record)
            store_proposal(self.state.store, result, record, selection.agent, proposer.name,
                           self.state.settings.proposal, manual_sha)
            self.state.stop(record, confined=proposer.confined)
        self.state.check_store("while the proposer ran", confined=proposer.confined)
        return (None if proposal.error else patched), proposal.rationale, proposal.error
