"""The targeting step of an iteration: the buckets set aside at this base, then the targets,
each confirmed failing on fresh trials (`select`); or, for a hand edit, the buckets it is for
(`hand_targets`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from optimizer.loop.candidate import Candidates
from optimizer.loop.hand_edit import HandEdit, hand_selection
from optimizer.loop.state import IterationState
from optimizer.proposal.diffs import unified as text_diff
from optimizer.proposal.pool import load_records, nothing_new, pool_folder
from optimizer.proposal.proposers import patch_format
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
    whose confirmation passes every trial is skipped for the next failing bucket. In the
    `example` patch format the targets are the failing buckets a patch made without the patcher
    can address (`with_examples`), when there is one."""
    skip = set(exhausted)
    confirm = state.settings.confirm_trials
    prefer_named = prefers_named(state.settings.target_order, state.settings.models.agent_model)
    while True:
        selection = select_targets(state.evidence, state.suites, max_targets=state.settings.target_buckets,
                                   agent=agent, skip=skip, prefer_named=prefer_named)
        if selection is not None and patch_format(state.settings.proposal) == "example":
            selection = with_examples(state, selection, agent, skip, prefer_named)
        if selection is not None and (spent := searched_out(state, selection)):
            skip |= spent
            continue
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


def searched_out(state: IterationState, selection: Selection) -> set[tuple[str, str]]:
    """The targets, when the iteration would search and their pool at this base prompt already
    ended with nothing new to screen (`search.nothing_new`: e.g. every worked example of them
    was tried): a search on it would end at once, an iteration rejected without a proposal
    that only spends the night's patience. Logged; the targeting goes on to the next bucket."""
    if not state.settings.search_rollouts:
        return set()
    targets = {(t.suite, t.bucket) for t in selection.targets}
    folder = pool_folder(state.search_dir, selection.agent, state.base_prompt(selection.agent), targets)
    records = load_records(folder)
    if not nothing_new(records):
        return set()
    state.log(f"not targeted (the search pool at this base ended with nothing new to screen, {len(records)} "
              f"candidate(s)): " + ", ".join(sorted("/".join(key) for key in targets)))
    return targets


def with_examples(state: IterationState, selection: Selection, agent: str | None, skip: set[tuple[str, str]],
                  prefer_named: bool) -> Selection:
    """In the `example` format, the failing buckets a patch made without the patcher can address
    (an answer the prompt shows, which their failures chose, or a worked example; not one the
    gate already rejected at this base), in the targeting's order (`select_targets`): a bucket
    with neither (one train task, every candidate's answer also another task's, or every one
    judged) would get a rule from the small patcher, which
    carries over to new notes far less often than an example does (docs/proposers.md). When no
    failing bucket has one, `selection` as it was (its targets then get a rule)."""
    candidates = Candidates(state)
    path = state.prompt_paths[selection.agent]
    prompt = state.base_prompt(selection.agent)
    passed_over: set[tuple[str, str]] = set()
    current: Selection | None = selection
    while current is not None:
        keep = [target for target in current.targets
                if candidates.prepared(replace(current, targets=[target]), prompt, path, 0)]
        if len(keep) == len(current.targets):
            break
        passed_over |= {(target.suite, target.bucket) for target in current.targets if target not in keep}
        current = select_targets(state.evidence, state.suites, max_targets=state.settings.target_buckets,
                                 agent=current.agent, skip=skip | passed_over, prefer_named=prefer_named)
    if current is None:
        return selection
    if passed_over:
        state.log("no worked example or shown answer left for "
                  + ", ".join(sorted("/".join(key) for key in passed_over))
                  + "; targeting " + ", ".join(f"{t.suite}/{t.bucket}" for t in current.targets) + " instead")
    return current


def hand_targets(state: IterationState, edit: HandEdit) -> Selection | None:
    path = state.prompt_paths[edit.agent]
    diff = text_diff(state.base_prompt(edit.agent), edit.text, path)
    selection, how = hand_selection(edit, diff, state.evidence, state.suites,
                                    max_targets=state.settings.target_buckets)
    if selection is not None:
        state.log(f"the hand edit's targets ({how}): "
                  + ", ".join(f"{t.suite}/{t.bucket}" for t in selection.targets))
    return selection
