"""The echo agent: one tool, `save_reply`; the run ends when a reply is saved."""

from __future__ import annotations

from typing import Any

from echo_plugin.outcome import EchoOutcome
from optimizer import (AgentContext, AgentRun, LoopLimits, Outcome, Tool, ToolLoop, ToolOutput, agent,
                       tool_error)

SAVE_REPLY = {"type": "function", "function": {
    "name": "save_reply", "description": "Save the reply to the user's note.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}


@agent("echo_agent", prompt_file="prompts/echo_agent.md", tools=["save_reply"], outcome=EchoOutcome)
def run(context: AgentContext) -> AgentRun:
    saved: list[str] = []

    def save(arguments: dict[str, Any]) -> ToolOutput:
        text = arguments.get("text")
        if not isinstance(text, str) or not text.strip():
            return tool_error(["text must be a non-empty string"])
        saved.append(text.strip())
        return ToolOutput("saved")

    loop = ToolLoop(context, [Tool(SAVE_REPLY, save, terminal=True)], LoopLimits(max_turns=4),
                    tool_choice="required")
    transcript = loop.run([{"role": "system", "content": context.system_prompt},
                           {"role": "user", "content": context.task.input.content}])
    return AgentRun(transcript=transcript,
                    outcome=Outcome(environment_state=EchoOutcome(reply=saved[-1] if saved else None,
                                                                  saves=len(saved))))
