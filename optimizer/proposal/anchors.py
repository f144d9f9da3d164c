"""Answers the prompt shows: a patch kind that takes out of the prompt a literal that is also a
train task's graded answer, once the agent's failures chose it.

A prompt that names one concrete answer as an illustration ("paths such as
`Areas/Health/running.md`") pulls a small model's answers toward it, the common-token and
majority-label biases of in-context examples (Zhao et al., "Calibrate Before Use: Improving
Few-Shot Performance of Language Models", ICML 2021). When the literal is also an answer key of a
task's graders (what the hard-coding lint refuses a patch to add), the prompt both misleads the
notes it does not fit and gives the answer away to those it does. The patch replaces every
occurrence with the agent's placeholder, the wording in `<prompt>.anchor.yaml` beside its prompt
file (prompt text lives in prompt files); an agent without that file gets no such patch.

It is offered for a target only when a failed train trial of a targeted bucket chose the literal:
one of its graders names as what the agent got the literal, or a folder it lies under, where
nothing under that was expected (a note filed into the prompt's example file, not a near miss
beside it). Holdout trials are never read. The gate judges it as any patch: the tasks whose answer
the literal is stay in its pairs, so the cost of no longer showing them their answer is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

import yaml

from optimizer.errors import ConfigError
from optimizer.proposal.patch import LintIndex
from optimizer.proposal.targets import trial_confusions
from optimizer.types import Trial


@dataclass(frozen=True)
class Anchor:
    literal: str
    placeholder: str
    owners: tuple[str, ...]
    """The tasks whose graded answer the literal is."""
    chosen_by: tuple[str, ...]
    """The failed train tasks of the targets that chose it."""

    def apply(self, prompt: str) -> str:
        return prompt.replace(self.literal, self.placeholder)

    def rationale(self) -> str:
        return (f"answer shown in the prompt: `{self.literal}` is the answer of {', '.join(self.owners)}, and failed "
                f"trials of {', '.join(self.chosen_by)} chose it; replaced with `{self.placeholder}`")


def anchor_path(prompt_file: Path) -> Path:
    """The placeholder wording beside a prompt file: `pkm_agent.md` -> `pkm_agent.anchor.yaml`."""
    return prompt_file.with_name(prompt_file.stem + ".anchor.yaml")


def read_placeholder(prompt_file: Path) -> str | None:
    """The agent's placeholder (`{suffix}` is the literal's file extension), or None without the
    file; a file without a one-line `placeholder` is an error naming it."""
    path = anchor_path(prompt_file)
    if not path.is_file():
        return None
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path.name} is not valid YAML: {exc}", field="placeholder",
                          fix=f"write {path.name} as `placeholder: \"<folder>/<file>{{suffix}}\"`") from exc
    value = loaded.get("placeholder") if isinstance(loaded, dict) else None
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ConfigError(f"{path.name} needs `placeholder`: one line that replaces an answer the prompt shows",
                          field="placeholder", fix=f"write {path.name} as `placeholder: \"<folder>/<file>{{suffix}}\"`")
    return value.strip()


def find(baseline: Iterable[Trial], index: LintIndex, prompt: str, targets: Iterable[tuple[str, str]],
         tasks: set[str], placeholder: str | None) -> list[Anchor]:
    """The answers `prompt` shows (answer keys of the agent's `tasks`) that failed train trials of
    `targets` chose, most chosen first."""
    if placeholder is None:
        return []
    shown = {key: sorted(owners & tasks) for key, (_, owners) in index.answer_keys.items()
             if owners & tasks and key in prompt}
    if not shown:
        return []
    targets = set(targets)
    chosen: dict[str, set[str]] = {}
    for trial in baseline:
        if trial.status != "failed" or trial.split != "train" or (trial.suite, trial.bucket) not in targets:
            continue
        for confusion in trial_confusions(trial):
            for key in shown:
                if _chose(key, confusion.got, confusion.expected):
                    chosen.setdefault(key, set()).add(trial.task_id)
    return [Anchor(key, placeholder.replace("{suffix}", PurePosixPath(key).suffix), tuple(shown[key]),
                   tuple(sorted(chosen[key])))
            for key in sorted(chosen, key=lambda key: (-len(chosen[key]), key))]


def _chose(literal: str, got: str, expected: str) -> bool:
    """The agent's answer `got` is the literal or a folder it lies under, and none of the expected
    answers (joined with " or ") is under `got`."""
    if not got or not (literal == got or literal.startswith(got.rstrip("/") + "/")):
        return False
    return not any(value == got or value.startswith(got.rstrip("/") + "/") for value in expected.split(" or "))
