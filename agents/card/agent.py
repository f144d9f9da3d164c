"""Card Agent: one raw input in, one timeline card file out (through the save tool)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .tool import FACT_ID, CardSaver, card_path, load_card
from ..texts import reminder, template, texts
from optimizer import AgentContext, AgentRun, LoopLimits, Outcome, Task, ToolLoop
from prompt_optimizer_outcomes.card import CardOutcome

LIMITS = LoopLimits(max_turns=8, max_reminders=3, budget_notice=2)


def user_message(task: Task) -> str:
    """The fixed layout of the user turn: content, fact_id, publish time, then any notes."""
    notes = []
    if task.input.assets:
        notes.append(template("card_agent.assets.md").format(assets="; ".join(task.input.assets)).strip())
    if task.input.location:
        notes.append(template("card_agent.location.md").format(location=task.input.location).strip())
    return template("card_agent.user.md").format(
        content=task.input.content,
        fact_id=task.input.resolved_fact_id(),
        published_at=task.input.resolved_published_at().isoformat(),
        notes="\n".join(notes),
    ).strip() + "\n"


def ensure_fact_file(workspace: Path, task: Task) -> None:
    """Write the day's fact file when the fixture does not provide it."""
    fact_id = task.input.resolved_fact_id()
    year, month, day, ts = FACT_ID.match(fact_id).groups()
    path = workspace / "Facts" / year / month / f"{day}.md"
    if path.exists():
        return
    os.makedirs(path.parent, exist_ok=True)
    stamp = task.input.resolved_published_at().strftime("%H:%M")
    path.write_text(f"## ts_{ts} {stamp}\n{task.input.content}\n", encoding="utf-8")


def run(context: AgentContext) -> AgentRun:
    task = context.task
    ensure_fact_file(context.workspace, task)
    fact_id = task.input.resolved_fact_id()
    card = CardFile(context.workspace, fact_id)
    saver = CardSaver(context.workspace, fact_id, task.input.resolved_published_at(), on_save=card.written)
    loop = ToolLoop(context, [saver.tool()], LIMITS,
                    completion_check=lambda: missing_parts(card),
                    reminder=lambda missing: reminder("card_agent.reminder.md", missing),
                    tool_choice="required", texts=texts("card_agent.loop.yaml"),
                    state=lambda: card.read()[0])
    messages = [{"role": "system", "content": context.system_prompt},
                {"role": "user", "content": user_message(task)}]
    transcript = loop.run(messages)
    return AgentRun(transcript=transcript, outcome=Outcome(environment_state=card_state(card, saver.errors)))


class CardFile:
    """The trial's card file, read from the workspace each time and parsed again only when its
    text changed (the completion check and the final state usually see the same card). A card
    the save tool has just written is not parsed at all: safe YAML loads back exactly the
    JSON-like data it was dumped from."""

    def __init__(self, workspace: Path, fact_id: str):
        self.fact_id = fact_id
        self.path = workspace / card_path(fact_id)
        self._raw: str | None = None
        self._card: dict[str, Any] = {}

    def written(self, raw: str, card: dict[str, Any]) -> None:
        self._raw, self._card = raw, card

    def read(self) -> tuple[str, dict[str, Any]]:
        """The saved card as raw YAML and parsed ('' and {} when there is none)."""
        raw = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if raw != self._raw:
            self._raw, self._card = raw, load_card(raw)
        return raw, self._card


def missing_parts(card: CardFile) -> list[str]:
    """What the completion check still wants: the card file, completed, titled, with a ui_config."""
    raw, parsed = card.read()
    return _missing(raw, parsed, card.fact_id)


def _missing(raw: str, card: dict[str, Any], fact_id: str) -> list[str]:
    says = texts("card_agent.checks.yaml")
    if not raw:
        return [says["no_card"]]
    missing = []
    if card.get("status") != "completed":
        missing.append(says["not_completed"])
    if not card.get("title"):
        missing.append(says["no_title"])
    if not card.get("ui_configs"):
        missing.append(says["no_ui_configs"])
    if card.get("fact_id") != fact_id:
        missing.append(says["wrong_fact_id"].format(fact_id=fact_id))
    return missing


def card_state(card_file: CardFile, save_errors: list[list[str]]) -> CardOutcome:
    raw, card = card_file.read()
    fact_id = card_file.fact_id
    return CardOutcome(
        saved=bool(raw),
        card_path=card_path(fact_id).as_posix() if raw else None,
        is_complete=bool(raw) and not _missing(raw, card, fact_id),
        status=card.get("status", "failed" if not raw else None),
        title=card.get("title"),
        fact_id=card.get("fact_id"),
        expected_fact_id=fact_id,
        template_ids=[c.get("template_id") for c in card.get("ui_configs") or []],
        card_tags=card.get("tags") or [],
        raw_yaml=raw,
        save_errors=save_errors,
    )
