"""The wording the agents send to models, read from `agents/prompts/` (none is written in code).

Each file is read once per process: the templates are filled in for every trial.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

PROMPTS = Path(__file__).resolve().parent / "prompts"


@functools.cache
def template(name: str) -> str:
    """A text template from `agents/prompts/`, such as `card_agent.user.md`."""
    return (PROMPTS / name).read_text(encoding="utf-8")


@functools.cache
def texts(name: str) -> dict[str, str]:
    """Named phrases from a YAML file in `agents/prompts/`, such as `card_agent.checks.yaml`."""
    return yaml.safe_load(template(name))


def reminder(name: str, missing: list[str]) -> str:
    """The completion reminder `name`, listing what the completion check still wants."""
    return template(name).format(problems="\n".join(f"- {item}" for item in missing)).strip()
