"""Worked examples: a patch kind that shows the agent one note of a targeted bucket and the calls
that handle it, taken from that task's reference solution.

A small model imitates a demonstration more reliably than it follows a rule, and a rule written
by a small patcher is often scoped to the failing notes' surface; an example carries the whole
decision. The examples are labelled demonstrations, chosen as DSPy's `LabeledFewShot` chooses
them (from the train set's own labels), one per proposal:

* from the train tasks of the targeted bucket that have a reference solution and an input of at
  least `patch.RUN_LENGTH` words, not already shown by the base prompt, the task the baseline
  passed most often first (the failing ones stay as the gate's evidence);
* an example whose calls hold another task's answer (an expected path shared with a task the
  prompt does not show) is passed over, as the hard-coding lint would refuse it;
* only while another train task of the bucket stays unshown: a task whose input the prompt shows
  never counts in the gate's pairs (`Iteration._compare` leaves it out, `patch.lint` lets its own
  words and answer keys through), so the bucket's improvement must show on a note the prompt does
  not contain;
* never alone: one demonstration pulls a small model's answers toward its own label (on the
  embedded model a single quote example made the one-emoji note a quote card in 13 trials of 14),
  the majority-label and recency biases of few-shot prompts (Zhao et al., "Calibrate Before Use:
  Improving Few-Shot Performance of Language Models", ICML 2021). So a proposal shows the
  target's example with *companions*: one example of each of other buckets, until the prompt's
  examples span `COMPANIONS` + 1 buckets, chosen as `BootstrapFewShot` chooses demonstrations
  (from what the agent already gets right): the buckets whose example task the baseline passed
  most often first, each under the same rules as the target's.

The example's wording is the agent's `<prompt>.example.md` beside its prompt file (prompt text
lives in prompt files): `{note}` becomes the task's input and `{calls}` its calls, one per line as
`name {arguments as JSON}`: the reference calls, or those the agent registers as its own path
(`@agent(demonstrate=...)`; the PKM Agent shows a note filed with the one `file_note` call its
prompt asks for, not the reference's look-read-edit calls). With `patch_format = "example"` a
target with no example left gets what `auto` would ask the patcher for
(`optimizer.proposal.make.make_proposer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from optimizer.proposal.patch import RUN_LENGTH, WORD, LintIndex, lint
from optimizer.types import Suite, Task, ToolCallSpec, Trial

Demonstrate = Callable[[Task], list[ToolCallSpec]]
"""The calls an example of a task shows: its reference calls, or the agent's own
(`AgentEntry.demonstrate`)."""

COMPANIONS = 3
"""A proposal's examples, with those the prompt shows, span this many buckets besides the target's."""
LONG_ARGUMENT = 400
"""String arguments longer than this are cut (with an ellipsis) in an example: a file's whole
new content teaches the call, not the file."""


@dataclass(frozen=True)
class Example:
    """What one proposal adds: the target's example and its companions, in this order."""
    suite: str
    task_ids: tuple[str, ...]
    text: str

    def apply(self, prompt: str) -> str:
        """The prompt with this example added at its end."""
        return prompt.rstrip("\n") + "\n\n" + self.text + "\n"

    def rationale(self) -> str:
        first, *companions = self.task_ids
        beside = f", beside {len(companions)} of other buckets ({', '.join(companions)})" if companions else ""
        return (f"worked example: the note of {self.suite}/{first} and its reference calls{beside}; a task shown "
                f"leaves the gate's pairs")


def template_path(prompt_file: Path) -> Path:
    """The example wording beside a prompt file: `card_agent.md` -> `card_agent.example.md`."""
    return prompt_file.with_name(prompt_file.stem + ".example.md")


def render(template: str, task: Task, demonstrate: Demonstrate = Task.reference_calls) -> str:
    calls = "\n".join(f"{call.name} {json.dumps(_cut(call.arguments), ensure_ascii=False)}"
                      for call in demonstrate(task))
    return template.replace("{note}", task.input.content.strip()).replace("{calls}", calls).strip("\n")


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > LONG_ARGUMENT:
        return value[:LONG_ARGUMENT].rstrip() + " …"
    if isinstance(value, dict):
        return {key: _cut(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut(item) for item in value]
    return value


def showable(task: Task) -> bool:
    return bool(task.reference_solution and task.reference_solution.tool_calls
                and len(WORD.findall(task.input.content)) >= RUN_LENGTH)


def choose(suites: Iterable[Suite], targets: Iterable[tuple[str, str]], baseline: Iterable[Trial],
           base_prompt: str, template: str, demonstrate: Demonstrate = Task.reference_calls) -> list[Example]:
    """The examples a proposal may add for `targets` (see the module docstring), each with its
    companions; one target's best after another's."""
    suites = list(suites)
    index = LintIndex.from_suites(suites)

    def show(task: Task) -> str:
        return render(template, task, demonstrate)

    shown = index.shown(base_prompt)
    passes: dict[tuple[str, str], list[bool]] = {}
    for trial in baseline:
        if trial.status != "errored":
            passes.setdefault((trial.suite, trial.task_id), []).append(trial.status == "passed")
    targets = sorted(set(targets))
    per_suite: dict[str, tuple[dict[str, float], list[Task]]] = {}  # its rates and companions, for every target
    per_target = []
    for suite_name, bucket in targets:
        suite = next((s for s in suites if s.name == suite_name), None)
        if suite is None:
            continue
        if suite_name not in per_suite:
            rate = {task.id: sum(p) / len(p) if (p := passes.get((suite_name, task.id))) else 0.0
                    for task in suite.tasks}
            per_suite[suite_name] = rate, _companions(suite, {b for s, b in targets if s == suite_name}, shown,
                                                      rate, base_prompt, show, index)
        rate, companions = per_suite[suite_name]
        examples = [Example(suite_name, tuple(one.id for one in (task, *companions)),
                            "\n\n".join(show(one) for one in (task, *companions)))
                    for task in _candidates(suite, bucket, shown, rate, base_prompt, show, index)]
        per_target.append([example for example in examples if lint(base_prompt, example.text, index).passed])
    return [examples[rank] for rank in range(max(map(len, per_target), default=0))
            for examples in per_target if rank < len(examples)]


def _candidates(suite: Suite, bucket: str, shown: set[str], rate: dict[str, float], base_prompt: str,
                show: Callable[[Task], str], index: LintIndex) -> list[Task]:
    """The bucket's tasks one may show, best first: train, unshown while another stays unshown,
    showable, passing the lint; the ones the baseline passed most often first."""
    unshown = [task for task in suite.tasks if task.split == "train" and task.bucket == bucket and task.id not in shown]
    if len(unshown) < 2:
        return []
    ranked = sorted((task for task in unshown if showable(task)), key=lambda task: (-rate[task.id], task.id))
    return [task for task in ranked if lint(base_prompt, show(task), index).passed]


def _companions(suite: Suite, targets: set[str], shown: set[str], rate: dict[str, float], base_prompt: str,
                show: Callable[[Task], str], index: LintIndex) -> list[Task]:
    """One example task of each of the other buckets that bring the prompt's examples up to
    `COMPANIONS` buckets besides a target's: the bucket whose best task the baseline passed most
    often first (then by name)."""
    by_id = {task.id: task for task in suite.tasks}
    shown_buckets = {by_id[task_id].bucket for task_id in shown if task_id in by_id} - targets
    need = COMPANIONS - len(shown_buckets)
    if need <= 0:
        return []
    best = [found[0] for bucket in sorted({task.bucket for task in suite.tasks} - targets - shown_buckets)
            if (found := _candidates(suite, bucket, shown, rate, base_prompt, show, index))]
    return sorted(best, key=lambda task: (-rate[task.id], task.bucket))[:need]
