"""`save_timeline_card`: validate the arguments, then write the card as YAML.

Invalid arguments come back as a tool error the model can correct; nothing is silently fixed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import yaml

from .templates import TAGS, TEMPLATE_IDS
from optimizer import Tool, ToolOutput, tool_error

SCHEMA = json.loads((Path(__file__).with_name("save_timeline_card.json")).read_text(encoding="utf-8"))
FACT_ID = re.compile(r"^(\d{4})/(\d{2})/(\d{2})\.md#ts_(\d+)$")


def card_path(fact_id: str) -> Path:
    """`2026/05/25.md#ts_3` -> `Cards/2026/05/25_ts_3.yaml`."""
    year, month, day, ts = FACT_ID.match(fact_id).groups()
    return Path("Cards") / year / month / f"{day}_ts_{ts}.yaml"


def validate(arguments: dict[str, Any], expected_fact_id: str) -> list[str]:
    problems = []
    fact_id = arguments.get("fact_id")
    if fact_id != expected_fact_id:
        problems.append(f"fact_id mismatch: got {fact_id!r}, the Raw Input ID is {expected_fact_id!r}")
    title = arguments.get("title")
    if not isinstance(title, str) or not title.strip():
        problems.append("title is missing or empty")
    configs = arguments.get("ui_configs")
    if not isinstance(configs, list) or not configs:
        problems.append("ui_configs must be a non-empty list of {template_id, data}")
    else:
        for index, config in enumerate(configs):
            if not isinstance(config, dict):
                problems.append(f"ui_configs[{index}] must be an object")
                continue
            if config.get("template_id") not in TEMPLATE_IDS:
                problems.append(f"ui_configs[{index}].template_id {config.get('template_id')!r} is not one of: "
                                + ", ".join(TEMPLATE_IDS))
            if not isinstance(config.get("data", {}), dict):
                problems.append(f"ui_configs[{index}].data must be an object")
    tags = arguments.get("tags") or []
    if not isinstance(tags, list) or any(tag not in TAGS for tag in tags):
        problems.append(f"tags must be a list drawn from: {', '.join(TAGS)}")
    for optional in ("address", "content_creation_date"):
        if arguments.get(optional) is not None and not isinstance(arguments[optional], str):
            problems.append(f"{optional} must be a string")
    unknown = set(arguments) - set(SCHEMA["function"]["parameters"]["properties"])
    if unknown:
        problems.append(f"unknown argument(s): {', '.join(sorted(unknown))}")
    return problems


@dataclass
class CardSaver:
    """The save tool bound to one trial's workspace and input."""

    workspace: Path
    fact_id: str
    published_at: datetime
    saved_path: Path | None = None
    errors: list[list[str]] = field(default_factory=list)
    on_save: Callable[[str, dict[str, Any]], None] | None = None
    """Told each card written, as YAML text and as the data it was dumped from."""

    def tool(self) -> Tool:
        return Tool(schema=SCHEMA, handler=self.save, terminal=True)

    def save(self, arguments: dict[str, Any]) -> ToolOutput:
        problems = validate(arguments, self.fact_id)
        if problems:
            self.errors.append(problems)
            return tool_error(problems)
        card = {
            "fact_id": self.fact_id,
            "timestamp": self.published_at.isoformat(),
            "status": "completed",
            "tags": list(arguments.get("tags") or []),
            "ui_configs": [{"template_id": c["template_id"], "data": c.get("data") or {}}
                           for c in arguments["ui_configs"]],
            "title": arguments["title"].strip(),
            "address": arguments.get("address"),
            "content_creation_date": arguments.get("content_creation_date"),
            "insight": None,
        }
        relative = card_path(self.fact_id)
        target = self.workspace / relative
        os.makedirs(target.parent, exist_ok=True)
        text = dump_card(card)
        target.write_text(text, encoding="utf-8")
        self.saved_path = relative
        if self.on_save:
            self.on_save(text, card)
        return ToolOutput(f"Saved the card to {relative.as_posix()}.")


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FastDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_card(card: dict[str, Any]) -> str:
    """YAML with unicode kept literal. libyaml's emitter escapes characters outside the basic
    plane (emoji become `\U0001F642`), which would hide them from `card_must_contain`; such cards
    are written by the pure-Python dumper instead."""
    options = {"allow_unicode": True, "sort_keys": False, "width": 10**9}
    text = yaml.dump(card, Dumper=_FastDumper, **options)
    if "\\U" in text:
        text = yaml.dump(card, Dumper=yaml.SafeDumper, **options)
    return text


def load_card(text: str) -> dict[str, Any]:
    card = yaml.load(text, Loader=_Loader) if text else None
    return card if isinstance(card, dict) else {}
