"""The targeting step of an iteration: the buckets set aside at this base, then the targets,
each confirmed failing on fresh trials (`select`); or, for a hand edit, the buckets it is for
(`hand_targets`)."""

from __future__ import annotations

from typing import Any

from optimizer.loop.hand_edit import HandEdit, hand_selection
from optimizer.loop.state import IterationState
from optimizer.proposal.diffs import unified as text_diff
from optimizer.proposal.request import Selection, exhausted_buckets, select_targets
from optimizer.proposal.targets import prefers_named


def exhausted(state: IterationState, rejected: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The buckets not targeted again at this base: `bucket_patience` rejected proposals, or
    searches that promoted none."""
    base = state.result.base
    exhausted = exhausted_buckets(rejected + state.store.iterations.rejected_unproposed(base.commit), base.commit,
                                  state.settings.bucket_patience)
    if exhausted:
        state.log(f"not targeted ({state.settings.bucket_patience}+ rejected proposals, or searches that promoted "
                  f"none, at this base): "
                  + ", ".join(sorted("/".join(key) for key in exhausted)))
    return exhausted


def select(state: IterationState, agent: str | None, exhausted: set[tuple[str, str]]) -> Selection | None:
    """The targets, each confirmed failing on fresh trials (`confirm_trials`): a target
    whose confirmation passes every trial is skipped for the next failing bucket."""
    skip = set(exhausted)
    confirm = state.settings.confirm_trials
    prefer_named = prefers_named(state.settings.target_order, state.settings.models.agent_model)
    while True:
        selection = select_targets(state.evidence, state.suites, max_targets=state.settings.target_buckets,
                                   agent=agent, skip=skip, prefer_named=prefer_named)
        if selection is None or not confirm:
            return selection
        adapter = state.screening_adapter(selection)
        prompt = state.base_prompt(selection.agent)
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
        state.result.skipped += names
        state.log(f"skipped (the baseline saw failures; {confirm} fresh trials each all passed): "
                  f"{', '.join(names)}")
        skip |= solved


def hand_targets(state: IterationState, edit: HandEdit) -> Selection | None:
    path = state.prompt_paths[edit.agent]
    diff = text_diff(state.base_prompt(edit.agent), edit.text, path)
    selection, how = hand_selection(edit, diff, state.evidence, state.suites,
                                    max_targets=state.settings.target_buckets)
    if selection is not None:
        state.log(f"the hand edit's targets ({how}): "
                  + ", ".join(f"{t.suite}/{t.bucket}" for t in selection.targets))
    return selection
