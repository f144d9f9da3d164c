"""OpenAI `tool_choice` semantics, for the client and for providers that enforce them themselves.

A choice is `"auto"`, `"none"`, `"required"`, one named function, or an `allowed_tools` choice
(`{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}`),
each entry of which may carry `parameters`: a narrower schema of that tool's arguments for this
call (paths that exist, say).
"""

from __future__ import annotations

from typing import Any


def offered(tools: list[dict] | None, tool_choice: Any) -> list[dict]:
    """The tools a reply may call under `tool_choice` (an `allowed_tools` entry with `parameters`
    narrows that tool's arguments)."""
    if not tools or tool_choice == "none":
        return []
    if isinstance(tool_choice, dict):
        wanted = {(entry.get("function") or {}).get("name"): (entry.get("function") or {}).get("parameters")
                  for entry in _allowed(tool_choice)["tools"]}
        chosen = []
        for tool in tools:
            function = tool.get("function", tool)
            if function.get("name") in wanted:
                narrowed = wanted[function["name"]]
                chosen.append({"type": "function", "function": {**function, "parameters": narrowed}}
                              if narrowed else tool)
        return chosen or tools
    return tools


def _allowed(tool_choice: dict) -> dict:
    """A dict `tool_choice` as {mode, tools}: an `allowed_tools` choice, or one named function."""
    if tool_choice.get("type") == "allowed_tools":
        allowed = tool_choice.get("allowed_tools") or {}
        return {"mode": allowed.get("mode", "auto"), "tools": allowed.get("tools") or []}
    return {"mode": "required", "tools": [tool_choice]}


def allows_final(tools: list[dict] | None, tool_choice: Any) -> bool:
    """Whether a plain answer is allowed: not when a tool call is required or named."""
    if not offered(tools, tool_choice):
        return True
    if isinstance(tool_choice, dict):
        return _allowed(tool_choice)["mode"] == "auto"
    return tool_choice != "required"
