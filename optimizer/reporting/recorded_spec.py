"""A run's recorded spec read as stored, without its pydantic models (`optimizer.provenance`).

`optimizer history` shows each run's spec in one line and what changed since the run before:
both come from the stored JSON. Building the spec's models to read two of its parts took about
a twentieth of that command's start-up, so the spec is checked here by shape: its parts are exactly
the model's (`SPEC_PARTS`, held equal to `RunSpec`'s fields by a test), and the two parts shown
have their types. A run still writes its spec through the model (`optimizer.trials.run_spec.fingerprints`)."""

from __future__ import annotations

from typing import Any

SPEC_PARTS = frozenset({"git", "packages", "optimizer_source", "models", "agents", "tasks", "graders",
                        "skipped_graders"})
"""The fields of `optimizer.provenance.RunSpec`."""
LATER_PARTS = frozenset({"skipped_graders"})
"""Fields with a default, absent from the specs of runs recorded before them."""


def short_spec(recorded: Any) -> str | None:
    """One line for tables: commit, dirty flag and package versions; None when `recorded` is not
    a run spec (a run recorded before specs existed, or one of another shape)."""
    if not isinstance(recorded, dict) or not SPEC_PARTS - LATER_PARTS <= set(recorded) <= SPEC_PARTS:
        return None
    git, packages = recorded["git"], recorded["packages"]
    if git is not None and not (isinstance(git, dict) and isinstance(git.get("commit"), str)
                                and isinstance(git.get("dirty"), bool)):
        return None
    if not (isinstance(packages, dict) and all(isinstance(value, str) for value in packages.values())):
        return None
    commit = f"{git['commit'][:10]}{'+dirty' if git['dirty'] else ''}" if git else "no git"
    versions = " ".join(f"{name}={version}" for name, version in sorted(packages.items()))
    return f"{commit} {versions}".strip()


def changed_parts(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Dotted paths of the spec fields that differ, e.g. `agents.card_agent.code` or
    `packages.litellm` (a part present on one side only counts as changed)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return [] if before == after else [""]
    parts = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            parts.append(key)
            continue
        parts += [f"{key}.{inner}" if inner else key for inner in changed_parts(before[key], after[key])]
    return parts
