"""What the steps of an iteration share (`IterationState`): the run's inputs, the base prompts'
evidence once gathered, and the few services every step may need (the base prompt, the
screening adapter, the store's watch, the record of a stop). A step reads what the steps before
it left here and adds its own; nothing outside the iteration sets it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from optimizer import gitops
from optimizer.files import write_text
from optimizer.loop.checkout_state import CheckoutChanged
from optimizer.loop.hand_edit import HAND_EDIT_LINES, HandEdit
from optimizer.loop.records import IterationResult, LoopContext, ProposalRecord, iteration_summary
from optimizer.loop.render import write_report
from optimizer.loop.staging import Stage, unseen_from
from optimizer.proposal.patch import LintIndex
from optimizer.proposal.proposers import LOG_TAIL_LINES, Proposal
from optimizer.proposal.request import Manual, Selection
from optimizer.proposal.screening import SCREEN_INDEX, ScreeningAdapter
from optimizer.settings.parts import LoopSettings, RunnerSettings
from optimizer.store.digest import NightScope, StoreChanged, StoreWatch
from optimizer.trials.evaluate import judges_used, non_voting_graders
from optimizer.trials.runner import PlannedTrial
from optimizer.types import Suite, Trial


@dataclass(frozen=True)
class IterationOptions:
    """How `run_iteration` was asked to run, fixed when the iteration is made."""

    search_dir: Path
    night_decisions: int | None = None
    """Inside a night, the candidates it gated before this iteration."""
    night: NightScope | None = None
    hand_edit: HandEdit | None = None
    dry_run: bool = False
    agent: str | None = None


class IterationState:
    def __init__(self, ctx: LoopContext, settings: LoopSettings, repo, suites: list[Suite],
                 prompt_paths: dict[str, str], prompt_files: dict[str, str], planned: list[PlannedTrial],
                 result: IterationResult, base_root: Path, options: IterationOptions):
        self.ctx, self.settings, self.repo, self.suites = ctx, settings, repo, suites
        self.prompt_paths, self.prompt_files = prompt_paths, prompt_files
        self.planned, self.result, self.options = planned, result, options
        self.store, self.log = ctx.store, ctx.log
        self.baseline: list[Trial] = []
        self.evidence: list[Trial] = []
        """The baseline and the other recorded trials of the base prompts (`Stage.evidence`)."""
        self.seen: dict[tuple[str, str], int] = {}
        """Per train task, the first trial index past the evidence (the gate's fresh pairs start there)."""
        self.watch: StoreWatch | None = None
        self.regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
        self.policy = settings.gate_policy
        judge = settings.models.judge_model
        self.non_voting = non_voting_graders(ctx.store, suites, judge) if judges_used(suites) else []
        self.stage = Stage(ctx, runner_settings(settings, self.non_voting), suites, planned, result, base_root)
        self.search_dir = options.search_dir
        self.adapter: ScreeningAdapter | None = None
        self.night_decisions = options.night_decisions
        """Inside a night, the candidates gated before this one (this iteration's own included)."""
        self.night = options.night
        self.hand_edit = options.hand_edit
        self.rejected: list[dict] = []
        """The store's rejected proposals, read by the targeting step (none for a hand edit)."""
        self.manual: Manual | None = None
        """The manual the request step sent."""
        self.request_args: dict = {}
        """The request's arguments but the prompt and the failures (`requesting.write_request`)."""

    def load_evidence(self) -> None:
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

    @cached_property
    def lint_index(self) -> LintIndex:
        """What patches may not copy, from every suite: one per iteration, read by the prepared
        patches (`Candidates.prepared`) and the checks of every proposal."""
        return LintIndex.from_suites(self.suites)

    def base_prompt(self, agent: str) -> str:
        return gitops.read_at(self.repo, self.result.base.commit, self.prompt_paths[agent])

    def screening_adapter(self, selection: Selection) -> ScreeningAdapter:
        """The iteration's screening adapter (one per iteration: its trial indexes never repeat)."""
        if self.adapter is None:
            items = {(item.suite.name, item.task.id): item for item in self.planned
                     if item.task.split == "train" and item.suite.spec.agent_name == selection.agent}
            self.adapter = ScreeningAdapter(items, lambda planned, prompt, label: self.stage.screen(
                planned, selection.agent, prompt, label), targets=set(), failures=lambda trials: [])
            self.adapter.set_adapter_state({"next_index": {"/".join(key): index for key, index in unseen_from(
                self.evidence, low=SCREEN_INDEX).items()}})
        return self.adapter

    def keep_log(self, path: Path, proposal: Proposal, proposer) -> None:
        """The proposer's log beside its request; a proposer command that failed also gets the end
        of it on the console, where the reason usually is (`command not found`, a missing key)."""
        if not proposal.log:
            return
        write_text(path, proposal.log)
        if proposal.error and proposer.name == "command":
            tail = proposal.log.rstrip().splitlines()[-LOG_TAIL_LINES:]
            self.log("\n".join([f"{proposal.error}; the end of its log ({path}):", *("  " + line for line in tail)]))

    def stop(self, record: ProposalRecord, *, confined: bool) -> None:
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

    def check_store(self, when: str, *, confined: bool) -> None:
        """Stop the iteration, recorded as stopped, when the completed runs it rests on changed in
        the store (`StoreWatch`): only a process outside the harness writes to those."""
        try:
            self.watch.check(when, confined=confined)
        except StoreChanged as exc:
            self.result.status = "stopped"
            self.store.iterations.finish(self.result.iteration_id, "stopped", {"stop_reason": exc.message})
            raise

    @property
    def size_limit(self) -> int:
        """Changed lines a patch may have (`max_changed_lines`); a hand edit has no limit."""
        return self.settings.max_changed_lines if self.hand_edit is None else HAND_EDIT_LINES

    def agent_of(self, suite_name: str) -> str:
        return next(suite.spec.agent_name for suite in self.suites if suite.name == suite_name)


def runner_settings(settings: LoopSettings, non_voting: list[str]) -> RunnerSettings:
    """The runner's settings for the loop's trials: the judges that do not vote are not asked
    when `non_voting_judges` is `skip` (the default)."""
    if settings.non_voting_judges == "skip" and non_voting:
        return replace(settings.runner, skip_graders=frozenset(non_voting))
    return settings.runner
