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

The iteration is a short driver over steps (`STEPS`: gather the evidence, target, write the
request, propose and gate the candidates, conclude), each a function of the iteration's shared
state (`optimizer.loop.state.IterationState`) that returns the status the iteration ends with,
or None to go on; the steps' work is in `targeting`, `requesting`, `candidate` (one candidate
through the checks and the gate) and `searching`. Its records are in `optimizer.loop.records`,
where its trials run in `optimizer.loop.staging`, and what it writes for people in
`optimizer.loop.render`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Protocol

from optimizer import gitops
from optimizer.errors import ConfigError
from optimizer.ledger import current as current_ledger
from optimizer.loop.candidate import Candidates
from optimizer.loop.checkout_state import CheckoutChanged
from optimizer.loop.hand_edit import PROPOSER, HandEdit, HandEditProposer
from optimizer.loop.records import IterationResult, Log, LoopContext, ProposalRecord, iteration_summary
from optimizer.loop.render import write_report
from optimizer.loop.requesting import write_request
from optimizer.loop.searching import Search
from optimizer.loop.staging import export_prompts
from optimizer.loop.state import IterationOptions, IterationState
from optimizer.loop.targeting import exhausted, hand_targets, select
from optimizer.models import validate_model
from optimizer.models.mock import check_patcher_script
from optimizer.nightly.watch import WatchNight, run_watch
from optimizer.proposal.box import stop_left_proposers
from optimizer.proposal.make import make_proposer
from optimizer.proposal.request import load_manual
from optimizer.registry import get_agent
from optimizer.settings.loading import check_search_budget
from optimizer.settings.parts import LoopSettings, ProposalSettings
from optimizer.store.digest import NightScope, StoreChanged
from optimizer.suites import load_suites, with_regression_suites
from optimizer.trials.evaluate import judges_used
from optimizer.trials.runner import new_run_id, plan, record_ending
from optimizer.types import Suite

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
    check_search_budget(ctx.settings.loop.search_rollouts)
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
            options = IterationOptions(search_dir or state_dir / "search", night_decisions, night, hand_edit,
                                       dry_run, agent)
            state = IterationState(ctx, settings, repo, suites, prompt_paths, prompt_files, planned, result,
                                   base_root, options)
            if watch is None:
                drive(state)
            else:
                run_watch(watch, repo=repo, tip=base.commit, planned=planned, prompt_paths=prompt_paths,
                          screen=state.stage.screen, policy=settings.gate_policy, log=ctx.log,
                          non_voting=state.non_voting)
                result.status = "watched"
                ctx.store.iterations.finish(iteration_id, "watched", iteration_summary(result))
    except (CheckoutChanged, StoreChanged):  # already recorded as stopped
        raise
    except BaseException as exc:
        record_ending(exc, lambda status, reason: ctx.store.iterations.finish(
            iteration_id, status, {"stop_reason": reason}))
        raise
    return result


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
        proposer_can_run(settings.proposal)
    return suites, prompt_paths


def proposer_can_run(settings: ProposalSettings) -> None:
    """Refuse a proposer that cannot run: its model, a mock patcher without its script or skill,
    a command proposer without a command (`make_proposer` checks it)."""
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


# ------------------------------------------------------------------------------------ the steps
class Step(Protocol):
    """One step of an iteration: it reads what the steps before it left in the state, adds its
    own, and returns the status the iteration ends with there, or None to go on."""

    def __call__(self, state: IterationState) -> str | None: ...


def gather(state: IterationState) -> str | None:
    """The base prompts' evidence: the baseline, the other recorded trials, the fresh pool."""
    state.load_evidence()
    return None


def target(state: IterationState) -> str | None:
    """The targets (`optimizer.loop.targeting`), or the end of an iteration with nothing to fix."""
    result = state.result
    if state.hand_edit is None:
        state.rejected = state.store.proposals.rejected()
        set_aside = exhausted(state, state.rejected)
        selection = select(state, state.options.agent, set_aside)
    else:  # a person's edit: no earlier proposal sets its targets aside or feeds its request
        state.rejected, set_aside = [], set()
        selection = hand_targets(state, state.hand_edit)
    if selection is not None:
        result.selection = selection
        return None
    state.log("no train trial failed: nothing to fix" if not set_aside and not result.skipped else
              "every failing bucket already had its rejected proposals at this base, or passed its fresh "
              "confirmation: nothing new to try")
    result.status = "nothing_to_fix"
    state.store.iterations.finish(result.iteration_id, "nothing_to_fix", iteration_summary(result),
                                  baseline_run_id=result.baseline_run_id)
    return "nothing_to_fix"


def request(state: IterationState) -> str | None:
    """`request.md` (`optimizer.loop.requesting`); a dry run ends there."""
    result, selection = state.result, state.result.selection
    prompt_path = state.prompt_paths[selection.agent]
    state.manual = load_manual(state.ctx.project_root, selection.agent)
    write_request(state, selection, state.base_prompt(selection.agent), prompt_path, state.manual, state.rejected)
    if not state.options.dry_run:
        return None
    result.status = "dry_run"
    state.store.iterations.finish(result.iteration_id, "dry_run", iteration_summary(result))
    return "dry_run"


def propose(state: IterationState) -> str | None:
    """The candidates: from a search, best first until one is accepted, `candidates` proposals
    straight to the gate, or the hand edit; of several accepted, the one that gained most."""
    selection = state.result.selection
    prompt_path = state.prompt_paths[selection.agent]
    prompt = state.base_prompt(selection.agent)
    lint_index = state.lint_index
    candidates = Candidates(state)
    if state.hand_edit is None:  # a proposer may not bring back what the watch took out; a person may
        lint_index.reverted = gitops.reverted_lines(state.repo, state.result.base.commit, prompt_path)
    if state.hand_edit is not None:
        candidates.gate_one(HandEditProposer(state.hand_edit), selection, prompt, prompt_path, lint_index,
                            state.manual.sha256, name=f"{selection.agent}-{PROPOSER}", note="a hand edit")
    else:
        proposer = make_proposer(state.settings.proposal)
        if proposer.note:
            state.log(f"note: {proposer.note}")
        if state.settings.search_rollouts:
            Search(state, candidates).search_then_gate(proposer, selection, prompt, prompt_path, lint_index,
                                                       state.manual.sha256)
        else:
            count = state.settings.candidates
            for number in range(1, count + 1):
                candidates.gate_one(proposer, selection, prompt, prompt_path, lint_index, state.manual.sha256,
                                    name=f"{selection.agent}-{number}", note=f"{number} of {count} this iteration")
    candidates.keep_best()
    return None


def conclude(state: IterationState) -> str | None:
    """The verdict of the iteration, its report, its record."""
    result = state.result
    result.status = "accepted" if result.accepted else "rejected"
    result.report_path = write_report(result)
    state.store.iterations.finish(result.iteration_id, result.status, iteration_summary(result))
    return result.status


STEPS: tuple[Step, ...] = (gather, target, request, propose, conclude)


def drive(state: IterationState) -> None:
    """The iteration: its steps in order, until one ends it."""
    for step in STEPS:
        ending = step(state)
        if ending is not None:
            state.result.status = ending
            return
