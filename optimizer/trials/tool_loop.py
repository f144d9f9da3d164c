"""The small tool-calling loop of the public API (`optimizer.ToolLoop`): the bundled agents run
on it, and so may a plugin's.

Build messages, call the model with tool schemas, execute tool calls, feed results back; stop on
a final answer, when a terminal tool succeeds, at the turn limit, or at the trial deadline. After
the model stops, an optional completion check may send a reminder and give it another turn.

A small model needs a harness that lets it finish, so the loop also (each part off unless the
agent's limits turn it on, every sentence from the agent's `<agent>.loop.yaml` prompt file):

* *the turn budget*: from `budget_notice` turns before the limit, a system note says how many
  turns are left;
* *a wrap-up phase*: in the last `wrap_up` turns (at most half the turns) only the finishing tools are offered (the ones
  the agent's `finishing` callable names for its state, by default the terminal tools);
* *repeats answered as such*: a call identical to an earlier one (same tool, same arguments)
  made while the agent's state has not changed is not run again; its answer says so and what
  is still missing. After `max_repeats` turns in a row made only of such calls the trial ends,
  failed, like one that used all its turns;
* *what to do next*: a terminal tool that succeeded without ending the run (the insight saved
  before the note is filed) gets the completion check's list appended to its result;
* *arguments that can work*: a tool may narrow its arguments for the moment (`Tool.narrow`: a
  path must be one that exists); the model is held to the narrower schema;
* *no call that cannot help*: such a tool, and a tool whose call was just answered as a repeat,
  is not offered again until the agent's state changes (unless nothing else would be left); an
  agent may also name the tools its state makes useful (`offer`);
* *a call made again on purpose*: a tool that first shows what the call needs (a file to be
  read before it is changed) asks for the same call again (`ToolOutput.again`), which is then run;
* *a cut-off reply said to be one*: a reply that stopped at its length limit before its call was
  complete (the embedded model's insight looping until the limit) is answered with the
  `cut_off` sentence (make the call again, shorter) instead of the reminder, which offers
  the alternatives (the PKM reminder names skipping, and the model then skipped a note whose
  filing call it had just written). The reply stays in the conversation cut to its first
  `CUT_OFF_SHOWN` characters: kept whole, the model copied its own loop into the next reply.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from optimizer.trials.agent_run import AgentContext
from optimizer.errors import ModelCallError, TrialCutShort, TrialTimeout
from optimizer.types import ToolCall, Transcript

CUT_OFF_SHOWN = 200
"""Characters of a reply cut off at its length limit kept in the conversation."""


@dataclass
class ToolOutput:
    text: str
    is_error: bool = False
    again: bool = False
    """The tool showed what the call needs and asks for the same call again (nothing was done):
    the next identical call is run, not answered as a repeat."""


@dataclass
class Tool:
    schema: dict[str, Any]
    """OpenAI function schema: {"type": "function", "function": {name, description, parameters}}."""
    handler: Callable[[dict[str, Any]], ToolOutput]
    terminal: bool | Callable[[], bool] = False
    """A successful call ends the conversation (the agent's job is done); a callable decides at
    the time of the call (e.g. only once the rest of the job is done)."""

    narrow: Callable[[], dict[str, Any] | None] | None = None
    """A narrower schema of the arguments for the moment (say, a path must be one that exists);
    None keeps the declared one. The model is held to it; the declared schema stays listed."""

    def ends_run(self) -> bool:
        return self.terminal() if callable(self.terminal) else self.terminal

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]


@dataclass
class LoopLimits:
    max_turns: int = 25
    max_reminders: int = 3
    max_repeats: int = 3
    """Turns in a row made only of repeated calls before the trial ends (0: never ends for it)."""
    budget_notice: int = 0
    """From this many turns left, a system note before each model call says how many remain."""
    wrap_up: int = 0
    """In the last this-many turns (at most half of them) only the finishing tools are offered."""


class AgentLimitError(TrialCutShort):
    """The agent used all its turns, or kept repeating itself, without finishing: the trial is
    failed with score 0."""


@dataclass
class ToolLoop:
    context: AgentContext
    tools: list[Tool]
    limits: LoopLimits = field(default_factory=LoopLimits)
    completion_check: Callable[[], list[str]] | None = None
    """Returns what is still missing after the model stops (empty when the job is done)."""
    reminder: Callable[[list[str]], str] | None = None
    tool_choice: str | None = None
    """"required" when the agent's job can only end with a tool call (no chat reply counts)."""
    system_note: Callable[[], str] | None = None
    """Computed before each model call; when it differs from the last note sent (and is not
    empty) it is appended to the conversation as a system message."""
    texts: dict[str, str] = field(default_factory=dict)
    """The loop's sentences (`budget`, `wrap_up`, `repeated`, `next_step`, `cut_off`), from the agent's
    `<agent>.loop.yaml`. A part whose sentence is missing stays silent."""
    state: Callable[[], Any] | None = None
    """A value that changes whenever the agent's world changes (files written, insight saved);
    an identical call made again under the same value is answered as a repeat."""
    finishing: Callable[[], list[str]] | None = None
    """The tools to offer in the wrap-up phase, by name (default: the terminal tools)."""
    offer: Callable[[], list[str]] | None = None
    """The tools to offer before the wrap-up, by name (default: all); the others stay listed but
    cannot be called until the agent's state makes them useful."""

    def run(self, messages: list[dict[str, Any]]) -> Transcript:
        transcript = Transcript(messages=messages)
        started = time.monotonic()
        try:
            self._converse(transcript)
        except (TrialCutShort, TrialTimeout, ModelCallError) as exc:
            exc.partial_transcript = transcript  # the runner records the conversation so far
            raise
        finally:
            transcript.latency_s = time.monotonic() - started
        return transcript

    def _converse(self, transcript: Transcript) -> None:
        by_name = {tool.name: tool for tool in self.tools}
        messages = transcript.messages
        turns = reminders = streak = 0
        answered: dict[str, int] = {}
        withheld: dict[str, str] = {}
        last_note = ""
        wrap_up_said = False
        while True:
            self.context.check_deadline()
            left = self.limits.max_turns - turns
            if left <= 0:
                raise AgentLimitError(f"the agent used all {self.limits.max_turns} turns without finishing")
            note = self.system_note() if self.system_note else ""
            if note and note != last_note:
                self._add_note(messages, note, first_turn=turns == 0)
            last_note = note
            offered = self._named(self.offer()) if self.offer else self.tools
            if left <= min(self.limits.wrap_up, self.limits.max_turns // 2):
                offered = self._finishing_tools()
                if wrap_up_said:
                    self._say("budget", messages, left=left, total=self.limits.max_turns)
                else:
                    wrap_up_said = self._say("wrap_up", messages, left=left,
                                             tools=", ".join(tool.name for tool in offered))
            elif self.limits.budget_notice and left <= self.limits.budget_notice:
                self._say("budget", messages, left=left, total=self.limits.max_turns)
            state = self._state()
            offered = [tool for tool in offered if withheld.get(tool.name) != state] or offered
            completion = self.context.model.complete(messages, [tool.schema for tool in self.tools],
                                                     tool_choice=self._choice(offered))
            messages.append(completion.message)
            turns += 1
            finished, repeats = False, 0
            for request in completion.tool_calls:
                answer = self._answer(request, by_name, answered, turns)
                repeats += answer.repeated
                transcript.tool_calls.append(ToolCall(id=request.id, name=request.name, arguments=request.arguments,
                                                      result=answer.output.text, is_error=answer.output.is_error))
                messages.append({"role": "tool", "tool_call_id": request.id, "name": request.name,
                                 "content": answer.output.text})
                finished = finished or answer.ended
                if answer.futile:
                    withheld[request.name] = self._state()  # it cannot do more until something changes
            if finished:
                return
            streak = streak + 1 if completion.tool_calls and repeats == len(completion.tool_calls) else 0
            if self.limits.max_repeats and streak >= self.limits.max_repeats:
                raise AgentLimitError(f"the agent kept repeating calls it had already made "
                                      f"({streak} times in a row) without finishing")
            if completion.tool_calls:
                continue
            if self._said_cut_off(completion, messages):
                continue
            missing = self.completion_check() if self.completion_check else []
            if not missing or reminders >= self.limits.max_reminders or self.reminder is None:
                return
            reminders += 1
            messages.append({"role": "user", "content": self.reminder(missing)})

    def _said_cut_off(self, completion: Any, messages: list[dict[str, Any]]) -> bool:
        """Answer a reply cut off at its length limit with the `cut_off` sentence, the reply cut
        to its start; False when it was not cut off (or the agent has no such sentence)."""
        if not completion.cut_off or not self.texts.get("cut_off"):
            return False
        messages[-1]["content"] = str(completion.content or "")[:CUT_OFF_SHOWN]
        messages.append({"role": "user", "content": self.texts["cut_off"].strip()})
        return True

    def _answer(self, request: Any, by_name: dict[str, Tool], answered: dict[str, int], turn: int) -> "_Answer":
        """Run one requested call, or answer it as a repeat."""
        tool = by_name.get(request.name)
        if tool is None:
            return _Answer(tool_error([f"there is no tool named {request.name!r}; the tools are: "
                                       + ", ".join(sorted(by_name))]))
        signature = self._signature(request)
        if signature in answered and self.texts.get("repeated"):
            return _Answer(ToolOutput(self._with_next_step(self.texts["repeated"].format(turn=answered[signature]))),
                           repeated=True, futile=True)
        output = tool.handler(request.arguments)
        if not output.again:
            answered.setdefault(self._signature(request), turn)  # the state as this call left it
        if output.is_error or output.again or not tool.terminal:
            return _Answer(output)
        if tool.ends_run():
            return _Answer(output, ended=True)
        # a finishing tool that did not finish: say what is missing
        return _Answer(ToolOutput(self._with_next_step(output.text)), futile=True)

    @staticmethod
    def _add_note(messages: list[dict[str, Any]], note: str, *, first_turn: bool) -> None:
        """A system note (observations about the environment) joins the conversation. One there
        before the first turn goes before the user's message, as context for it: appended after
        it, the 1.5B model answered the note instead of the message (every PKM filing task whose
        knowledge base drew a reminder was skipped at once, every one without a reminder was
        filed). Later notes follow what they observe."""
        before_task = first_turn and messages and messages[-1].get("role") == "user"
        messages.insert(len(messages) - 1 if before_task else len(messages), {"role": "system", "content": note})

    def _state(self) -> str:
        return json.dumps(self.state() if self.state else None, sort_keys=True, ensure_ascii=False, default=str)

    def _signature(self, request: Any) -> str:
        return json.dumps([request.name, request.arguments, self._state()], ensure_ascii=False)

    def _with_next_step(self, text: str) -> str:
        missing = self.completion_check() if self.completion_check else []
        if not missing or not self.texts.get("next_step"):
            return text.strip()
        return (text.strip() + "\n" + self.texts["next_step"].format(
            problems="\n".join(f"- {item}" for item in missing))).strip()

    def _choice(self, offered: list[Tool]) -> Any:
        """`tool_choice` for this call: the loop's own, or, when only some tools are offered or
        some are narrowed, an OpenAI `allowed_tools` choice naming them, each with its narrowed
        arguments (the declared list stays in the request, so a model's cached prompt prefix
        still holds; see `ModelClient.complete`)."""
        narrowed = {tool.name: tool.narrow() for tool in offered if tool.narrow}
        if len(offered) == len(self.tools) and not any(narrowed.values()):
            return self.tool_choice
        entries = []
        for tool in offered:
            function: dict[str, Any] = {"name": tool.name}
            if narrowed.get(tool.name):
                function["parameters"] = narrowed[tool.name]
            entries.append({"type": "function", "function": function})
        return {"type": "allowed_tools", "allowed_tools": {"mode": self.tool_choice or "auto", "tools": entries}}

    def _finishing_tools(self) -> list[Tool]:
        return self._named(self.finishing() if self.finishing else [tool.name for tool in self.tools if tool.terminal])

    def _named(self, names: list[str]) -> list[Tool]:
        """The tools called `names`, in declared order (all of them when none is)."""
        return [tool for tool in self.tools if tool.name in names] or self.tools

    def _say(self, key: str, messages: list[dict[str, Any]], **values: Any) -> bool:
        text = self.texts.get(key)
        if not text:
            return False
        messages.append({"role": "system", "content": text.format(**values).strip()})
        return True


@dataclass
class _Answer:
    """What the loop answered to one call."""

    output: ToolOutput
    repeated: bool = False
    """Not run: the same call was answered before, under the same state."""
    ended: bool = False
    """A finishing tool succeeded and the job is done."""
    futile: bool = False
    """The call could not help (a repeat, or a finishing tool that did not finish): the tool is
    withheld until the state changes."""


def tool_error(problems: list[str]) -> ToolOutput:
    return ToolOutput(json.dumps({"error": problems}, ensure_ascii=False), is_error=True)
