"""The small tool-calling loop both agents share.

Build messages, call the model with tool schemas, execute tool calls, feed results back; stop on
a final answer, when a terminal tool succeeds, at the turn limit, or at the trial deadline. After
the model stops, an optional completion check may send a reminder and give it another turn.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from optimizer import AgentContext, ModelCallError, ToolCall, Transcript, TrialCutShort, TrialTimeout


@dataclass
class ToolOutput:
    text: str
    is_error: bool = False


@dataclass
class Tool:
    schema: dict[str, Any]
    """OpenAI function schema: {"type": "function", "function": {name, description, parameters}}."""
    handler: Callable[[dict[str, Any]], ToolOutput]
    terminal: bool | Callable[[], bool] = False
    """A successful call ends the conversation (the agent's job is done); a callable decides at
    the time of the call (e.g. only once the rest of the job is done)."""

    def ends_run(self) -> bool:
        return self.terminal() if callable(self.terminal) else self.terminal

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]


@dataclass
class LoopLimits:
    max_turns: int = 25
    max_reminders: int = 3


class AgentLimitError(TrialCutShort):
    """The agent used all its turns without finishing: the trial is failed with score 0."""


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
        schemas = [tool.schema for tool in self.tools]
        messages = transcript.messages
        turns = reminders = 0
        last_note = ""
        while True:
            self.context.check_deadline()
            if turns >= self.limits.max_turns:
                raise AgentLimitError(f"the agent used all {self.limits.max_turns} turns without finishing")
            note = self.system_note() if self.system_note else ""
            if note and note != last_note:
                messages.append({"role": "system", "content": note})
            last_note = note
            completion = self.context.model.complete(messages, schemas, tool_choice=self.tool_choice)
            messages.append(completion.message)
            turns += 1
            finished = False
            for request in completion.tool_calls:
                output = by_name[request.name].handler(request.arguments)
                transcript.tool_calls.append(ToolCall(id=request.id, name=request.name, arguments=request.arguments,
                                                      result=output.text, is_error=output.is_error))
                messages.append({"role": "tool", "tool_call_id": request.id, "name": request.name,
                                 "content": output.text})
                finished = finished or (not output.is_error and by_name[request.name].ends_run())
            if completion.tool_calls and not finished:
                continue
            missing = self.completion_check() if self.completion_check else []
            if not missing or reminders >= self.limits.max_reminders or self.reminder is None:
                return
            reminders += 1
            messages.append({"role": "user", "content": self.reminder(missing)})


def tool_error(problems: list[str]) -> ToolOutput:
    return ToolOutput(json.dumps({"error": problems}, ensure_ascii=False), is_error=True)
