"""PKM Agent: files one raw note into a PARA Markdown knowledge base, or skips it.

The trial workspace holds `PKM/` (a copy of the task's fixture) and `.pkm/edit_history.json`
(the files edited in the last runs, for the catch-all reminder). The user message lists the
knowledge base's PARA folders and files (`agents.pkm.filing`), so the agent chooses among listed
targets. The agent works only through the sandboxed tools, and every turn must be a tool call
(`tool_choice="required"`: only what is filed counts, never a chat reply). The loop's harness is
on (`optimizer.ToolLoop`): the turn budget is announced as it runs down, the insight tool is offered
only once something was written (`file_note` takes the insight itself), the last turns offer only
the finishing tools, and a repeated call is answered as such. The run ends when
`skip_pkm_organization` succeeds, when the insight is set once the note is filed (its marker is
in a PARA file), when the model stops
without a tool call (a provider that cannot force tool calls), or, with the trial failed at score
0, at the turn limit or at the trial deadline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import filing
from .reminders import load_history, reminders
from .sandbox import Sandbox, SandboxError, write_file
from .state import build_state, marker_for, snapshot
from .tools import PARA_ROOTS, SCHEMAS, PKMTools
from .triage import KEEP, Triage, deciding_choice
from ..texts import reminder, template, texts
from optimizer import AgentContext, AgentRun, LoopLimits, Outcome, Task, ToolLoop

MAX_TURNS = 13
"""Model turns a trial may take, the first deciding whether to keep the note (a task may set
`metadata.max_turns`); past it the trial fails with score 0."""
MAX_REMINDERS = 2
BUDGET_NOTICE = 6
"""From this many turns left, the agent is told how many remain."""
WRAP_UP = 3
"""In the last turns only the finishing tools are offered (see `Triage.finishing`)."""


def user_message(task: Task, name: str = "pkm_agent.user.md", closest: str = "") -> str:
    """The note and the first question: keep it or skip it (`agents.pkm.triage`); with `name`
    `pkm_agent.again.md`, the same asked again with the files `closest` to the note."""
    return template(name).format(
        content=task.input.content, fact_id=task.input.resolved_fact_id(),
        published_at=task.input.resolved_published_at().isoformat(), closest=closest,
    ).strip() + "\n"


def kept_message(said: dict[str, str], reminded: str, knowledge_base: str, files: list[tuple[str, str]]) -> str:
    """What `keep_note` answers: the knowledge base's reminders, the knowledge base as listed by
    `agents.pkm.filing.listing`, the files closest to the note (`agents.pkm.filing.ranked`) and,
    last, where to file it: in the closest file, named, unless the note starts a topic of its own
    (`where_closest`)."""
    where = said["where_listed"]
    if files:
        folder, _, file = files[0][0].rpartition("/")
        where = said["where_closest"].format(path=files[0][0], folder=folder, file=file)
    return template("pkm_agent.kept.md").format(
        reminders=reminded + "\n\n" if reminded else "", knowledge_base=knowledge_base,
        closest=filing.named(files, said["closest"]), where=where).strip()


def read_again(context: AgentContext, pkm: Path, said: dict[str, str]) -> bool:
    """Whether the note, asked about again in a fresh conversation with the files closest to it
    named (`pkm_agent.again.md`), is kept (`agents.pkm.triage`)."""
    task = context.task
    message = user_message(task, "pkm_agent.again.md", filing.closest(pkm, task.input.content, said["closest_again"]))
    completion = context.model.complete(
        [{"role": "system", "content": context.system_prompt}, {"role": "user", "content": message}],
        list(SCHEMAS.values()), tool_choice=deciding_choice())
    return any(call.name == KEEP for call in completion.tool_calls)


def settle_mtimes(pkm: Path, task: Task) -> None:
    """Give every fixture file the same time (the day before the note), so `Glob`'s newest-first
    order does not depend on when the project was checked out."""
    stamp = task.input.resolved_published_at().timestamp() - 86_400
    for path in pkm.rglob("*"):
        os.utime(path, (stamp, stamp), follow_symlinks=False)


def missing_parts(tools: PKMTools, triage: Triage) -> list[str]:
    """What the note still needs, each naming only tools the agent is offered at that point."""
    if tools.skip_evidence is not None:
        return []
    says = texts("pkm_agent.checks.yaml")
    if triage.deciding(tools.mutated):
        return [says["not_decided"]]
    missing = []
    if not tools.filed():
        missing.append(says["not_filed"].format(roots=", ".join(PARA_ROOTS), marker=marker_for(tools.fact_id)))
    if tools.insight is None:
        missing.append(says["no_insight"])
    return missing


def run(context: AgentContext) -> AgentRun:
    task = context.task
    fact_id = task.input.resolved_fact_id()
    pkm = context.workspace / "PKM"
    state_dir = context.workspace / ".pkm"
    sandbox = Sandbox(pkm)
    settle_mtimes(pkm, task)
    before = snapshot(pkm)
    history = load_history(state_dir)
    tools = PKMTools(sandbox, fact_id)
    said = texts("pkm_agent.filing.yaml")
    shown: list[str] = []
    computed: dict[int, str] = {}
    told: list[str] = []

    def reminded() -> str:
        """The reminders for the tree as it is now; recomputed only after the tree changed."""
        changes = tools.mutations
        if changes not in computed:
            computed.clear()
            computed[changes] = "\n".join(reminders(pkm, history))
        note = computed[changes]
        if note and note not in shown:
            shown.append(note)
        return note

    def kept() -> str:
        told.append(reminded())
        return kept_message(said, told[-1], filing.listing(pkm, tools.folders(), said["more"]),
                            filing.ranked(pkm, task.input.content))

    def system_note() -> str:
        """The reminders once the note is kept (the decision to keep it is made on the note
        alone), unless `keep_note`'s answer told them already."""
        if triage.deciding(tools.mutated):
            return ""
        note = reminded()
        return "" if told and note == told[-1] else note

    triage = Triage(kept, lambda: read_again(context, pkm, said), said["kept_again"])

    limits = LoopLimits(max_turns=int(task.metadata.get("max_turns", MAX_TURNS)), max_reminders=MAX_REMINDERS,
                        budget_notice=BUDGET_NOTICE, wrap_up=WRAP_UP)
    loop = ToolLoop(context, triage.listed(tools.tools()), limits,
                    completion_check=lambda: missing_parts(tools, triage),
                    reminder=lambda missing: reminder("pkm_agent.reminder.md", missing),
                    system_note=system_note, tool_choice="required", texts=texts("pkm_agent.loop.yaml"),
                    state=lambda: (tools.mutations, tools.insight, tools.skip_evidence),
                    finishing=lambda: triage.finishing(tools.filed()),
                    offer=lambda: triage.offered(tools.mutated))
    messages = [{"role": "system", "content": context.system_prompt},
                {"role": "user", "content": user_message(task)}]
    transcript = loop.run(messages)
    after = snapshot(pkm)
    state = build_state(fact_id=fact_id, before=before, after=after, events=tools.events,
                        insight=tools.insight.__dict__ if tools.insight else None,
                        skip_evidence=tools.skip_evidence, reminders=shown)
    record_history(state_dir, task, state.created + state.modified, history)
    return AgentRun(transcript=transcript, outcome=Outcome(environment_state=state))


def record_history(state_dir: Path, task: Task, edited: list[str], history: list[dict]) -> None:
    """Append this run to the workspace's edit history (the last five runs are kept). A history
    file or folder that is a link is left alone, unwritten: it may lead out of the workspace."""
    if not edited or state_dir.is_symlink():
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    runs = history + [{"date": task.input.resolved_published_at().date().isoformat(), "edited": edited}]
    text = json.dumps({"runs": runs[-5:]}, indent=2) + "\n"
    try:
        write_file(state_dir / "edit_history.json", text.encode("utf-8"), "edit_history.json")
    except SandboxError:
        return
