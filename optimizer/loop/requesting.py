"""The request step of an iteration: `request.md` for the proposer, recorded with the targets."""

from __future__ import annotations

from typing import Any

from optimizer.files import write_text
from optimizer.loop.state import IterationState
from optimizer.models import context_window
from optimizer.proposal.proposers import asked_format, patch_format
from optimizer.proposal.request import Manual, Selection, rejected_ideas, render_request, request_failures


def write_request(state: IterationState, selection: Selection, prompt: str, prompt_path: str, manual: Manual,
                  rejected: list[dict[str, Any]]) -> None:
    """`request.md` for the proposer, recorded with the targets. Its arguments but the prompt
    and the failures are kept (`request_args`): the search renders one per parent prompt."""
    result, settings = state.result, state.settings
    failures = request_failures(state.evidence, state.suites, selection, patch_format(settings.proposal))
    budget = settings.request_token_budget
    window = context_window(settings.proposal.patcher_model) if settings.proposal.proposer == "llm" else None
    if window:  # half the patcher's context: the rest holds its instructions and the answer
        budget = min(budget, window // 2)
    targets = [f"{t.suite}/{t.bucket}" for t in selection.targets]
    state.request_args = dict(selection=selection, prompt_file=prompt_path, manual=manual,
                              iteration_id=result.iteration_id, base_commit=result.base.commit,
                              agent_model=settings.models.agent_model, max_changed_lines=settings.max_changed_lines,
                              token_budget=budget, non_voting=state.non_voting,
                              judge_model=settings.models.judge_model,
                              rejected_ideas=rejected_ideas(rejected, set(targets)),
                              patch_format=asked_format(settings.proposal))
    request, omitted = render_request(prompt=prompt, failures=failures, **state.request_args)
    result.request_path = result.run_dir / "request.md"
    write_text(result.request_path, request)
    state.log(f"targets: {', '.join(targets)} ({len(failures)} failing task(s), {omitted} left out of the request)")
    state.log(f"request: {result.request_path}")
    state.store.iterations.set_targets(result.iteration_id, agent=selection.agent, targets=targets,
                                       baseline_run_id=result.baseline_run_id,
                                       request_path=str(result.request_path), manual_sha256=manual.sha256)
