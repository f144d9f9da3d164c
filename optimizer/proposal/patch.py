"""Prompt patches: exact search/replace edits, their diff, and the checks made before any rollout.

Checks, in order (the first that fails rejects the patch, with the offending text named):

* **files**: only the targeted agent's prompt file may change;
* **prompt_file** (on a proposer's whole change): the prompt file is still there, a regular file of
  UTF-8 text;
* **empty**: the patch changes something;
* **size**: added + removed lines within `max_changed_lines`;
* **reverted**: no added line is one the nightly's watch reverted as harmful (`LintIndex.reverted`);
* **hard-coding lint**: added text may not copy, unless the base prompt already had it
  (case-insensitive, whole words),
  - a task id of any suite,
  - answer-key text from a grader config: the values of the config fields a grader marks with
    `AnswerKey` (an expected file path, a graded substring of 3 or more characters, ...; the
    mark says how long a value must be to count),
  - a run of 4 or more consecutive words of any eval input (train or holdout). Runs made only
    of function words ("at the end of") are ignored: they are English, not test data.

  A worked example is not a copied answer: a task whose whole input the patched prompt shows
  (`shown_tasks`) never counts in the gate's pairs, so its own answer keys and input words may
  appear; text that also belongs to a task not shown is still refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from optimizer.proposal.diffs import changed_lines, net_changed_lines, unified
from optimizer.registry import get_grader
from optimizer.types import Suite

WORD = re.compile(r"\w+(?:[.,:/'-]\w+)*", re.UNICODE)
RUN_LENGTH = 4
FUNCTION_WORDS = frozenset("""a an the of to in on at for from by with and or but if then than as is are was were be
been it its this that these those there here i you he she we they me my your our their his her them us do does did
not no so up out into over about after before when what which who how all any some one just also very can will would
should could may might must have has had am""".split())


class EditError(ValueError):
    """An edit that does not apply; the message says which and why, for the proposer's retry."""


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str


@dataclass
class PatchCheck:
    passed: bool
    rule: str = ""
    reason: str = ""
    offending: list[str] = field(default_factory=list)


def apply_edits(text: str, edits: Iterable[Edit]) -> str:
    """Apply exact search/replace edits in order. Each search must occur exactly once; an empty
    search appends `replace` at the end of the text (how a new rule is most simply added)."""
    for number, edit in enumerate(edits, 1):
        if not edit.search:
            if not edit.replace.strip():
                raise EditError(f"edit {number}: both `search` and `replace` are empty; give the text to add")
            text = text.rstrip("\n") + "\n" + edit.replace.rstrip("\n") + "\n"
            continue
        count = text.count(edit.search)
        if count == 0:
            snippet = edit.search.strip().splitlines()[0][:80] if edit.search.strip() else edit.search[:80]
            raise EditError(f"edit {number}: the search text was not found in the prompt "
                            f"(starts {snippet!r}); copy it exactly, including line breaks")
        if count > 1:
            raise EditError(f"edit {number}: the search text occurs {count} times; include more "
                            f"surrounding text so it occurs once")
        text = text.replace(edit.search, edit.replace, 1)
    return text


@dataclass
class LintIndex:
    """What patches may not copy, collected once from the suites; each text with the tasks it
    comes from (a task shown whole in the prompt lends its texts to a worked example)."""

    task_ids: set[str] = field(default_factory=set)
    answer_keys: dict[str, tuple[str, frozenset[str]]] = field(default_factory=dict)
    """Answer-key texts from the graders' configs -> what the lint calls them (`graded substring`)
    and the ids of the tasks whose configs hold them."""
    runs: dict[tuple[str, ...], frozenset[str]] = field(default_factory=dict)
    """4-word runs of eval inputs -> the ids of the tasks whose inputs hold them."""
    inputs: dict[str, str] = field(default_factory=dict)
    """Task id -> its input, whitespace-folded (`folded`), for inputs of `RUN_LENGTH` words or more."""
    reverted: frozenset[str] = frozenset()
    """Lines the nightly's watch reverted as harmful (`gitops.reverted_lines`), stripped: a patch
    may not add one again."""

    @classmethod
    def from_suites(cls, suites: Iterable[Suite]) -> "LintIndex":
        index = cls()
        for suite in suites:
            for task in suite.tasks:
                index.task_ids.add(task.id)
                if len(WORD.findall(task.input.content)) >= RUN_LENGTH:
                    index.inputs[task.id] = folded(task.input.content)
                for run in word_runs(task.input.content):
                    index.runs[run] = index.runs.get(run, frozenset()) | {task.id}
                for spec in task.graders:
                    entry = get_grader(spec.name)
                    for mark, text in entry.answer_keys(entry.task_config(task, spec.config)):
                        label, owners = index.answer_keys.get(text, (mark.label, frozenset()))
                        index.answer_keys[text] = (label, owners | {task.id})
        return index

    def shown(self, prompt: str) -> set[str]:
        """The ids of the tasks whose whole input `prompt` shows (`shown_in`)."""
        text = folded(prompt)
        return {task_id for task_id, content in self.inputs.items() if content in text}


def folded(text: str) -> str:
    """Lower case, every run of white space one space: how an input is looked for in a prompt
    (an example may wrap or indent the note)."""
    return " ".join(text.lower().split())


def word_runs(text: str, length: int = RUN_LENGTH) -> set[tuple[str, ...]]:
    words = [word.lower() for word in WORD.findall(text)]
    runs = set()
    for start in range(len(words) - length + 1):
        run = tuple(words[start:start + length])
        if sum(word not in FUNCTION_WORDS for word in run) >= 2:
            runs.add(run)
    return runs


def _contains(haystack: str, needle: str) -> bool:
    pattern = re.escape(needle.lower())
    if re.match(r"\w", needle):
        pattern = r"(?<!\w)" + pattern
    if re.search(r"\w$", needle):
        pattern = pattern + r"(?!\w)"
    return re.search(pattern, haystack.lower()) is not None


def lint(base_prompt: str, added_text: str, index: LintIndex) -> PatchCheck:
    offending = []
    shown = index.shown(base_prompt + "\n" + added_text)
    for task_id in sorted(index.task_ids):
        if _contains(added_text, task_id) and not _contains(base_prompt, task_id):
            offending.append(f"task id {task_id!r}")
    for text, (label, owners) in sorted(index.answer_keys.items(), key=lambda item: (item[1][0], item[0])):
        if not owners <= shown and _contains(added_text, text) and not _contains(base_prompt, text):
            offending.append(f"{label} {text!r}")
    base_runs = word_runs(base_prompt)
    for run in sorted(word_runs(added_text) - base_runs):
        owners = index.runs.get(run, frozenset())
        if owners and not owners <= shown:
            offending.append(f"eval input words {' '.join(run)!r} (from task {min(owners - shown)})")
    if offending:
        return PatchCheck(False, "hard_coding", "the patch copies evaluation data: " + "; ".join(offending[:8]),
                          offending)
    examples = f"; worked examples of {', '.join(sorted(shown))} (left out of the gate's pairs)" if shown else ""
    return PatchCheck(True, "hard_coding",
                      "no task ids, expected paths, graded strings or eval input copied" + examples)


def check_prompt_text(*, prompt_file: str, base_prompt: str, patched: str, max_changed_lines: int,
                      index: LintIndex) -> PatchCheck:
    """`check_patch` on a prompt file's new text, before anything is written or committed."""
    diff = unified(base_prompt, patched, prompt_file)
    return check_patch(changed_files=[prompt_file], allowed_file=prompt_file, base_prompt=base_prompt, diff=diff,
                       max_changed_lines=max_changed_lines, index=index)


def check_patch(*, changed_files: list[str], allowed_file: str, base_prompt: str, diff: str,
                max_changed_lines: int, index: LintIndex) -> PatchCheck:
    """All pre-rollout checks; the first failure is returned."""
    files = _files_check(changed_files, allowed_file)
    return _content_checks(base_prompt, diff, max_changed_lines, index) if files.passed else files


def check_change(*, changed_files: list[str], allowed_file: str, patched: bytes | None, base_prompt: str,
                 diff: str, max_changed_lines: int, index: LintIndex) -> PatchCheck:
    """`check_patch` on a proposer's whole change (its worktree against the base commit), with the
    prompt file check right after the files check. `patched` is the prompt file's content in the
    change, None when there is no regular file there any more."""
    for found in (_files_check(changed_files, allowed_file), _prompt_file_check(allowed_file, patched)):
        if not found.passed:
            return found
    return _content_checks(base_prompt, diff, max_changed_lines, index)


def _files_check(changed_files: list[str], allowed_file: str) -> PatchCheck:
    others = sorted(set(changed_files) - {allowed_file})
    if others:
        return PatchCheck(False, "files", f"only {allowed_file} may change; the patch also changes "
                                          f"{', '.join(others)}", others)
    return PatchCheck(True, "files", f"only {allowed_file} changed")


def _prompt_file_check(prompt_file: str, patched: bytes | None) -> PatchCheck:
    if patched is None:
        return PatchCheck(False, "prompt_file", f"the patch removes {prompt_file} (deleted, moved, or replaced by "
                                                f"a link or folder); the prompt must be edited in place",
                          [prompt_file])
    try:
        patched.decode("utf-8")
    except UnicodeDecodeError as exc:
        return PatchCheck(False, "prompt_file", f"{prompt_file} is not UTF-8 text after the patch "
                                                f"({exc.reason} at byte {exc.start})", [prompt_file])
    return PatchCheck(True, "prompt_file", f"{prompt_file} is UTF-8 text")


def _content_checks(base_prompt: str, diff: str, max_changed_lines: int, index: LintIndex) -> PatchCheck:
    added, removed = changed_lines(diff)
    if not added and not removed:
        return PatchCheck(False, "empty", "the patch changes nothing")
    if len(added) + len(removed) > max_changed_lines:
        return PatchCheck(False, "size", f"{len(added)} added + {len(removed)} removed lines exceed the budget "
                                         f"of {max_changed_lines}")
    again = sorted(net_changed_lines(diff)[0] & index.reverted)
    if again:
        return PatchCheck(False, "reverted", "the patch adds again what the nightly's watch reverted as harmful: "
                                             + "; ".join(repr(line) for line in again[:3]), again)
    return lint(base_prompt, "\n".join(added), index)
