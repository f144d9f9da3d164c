"""Tool calling for the embedded model: a grammar every reply satisfies, and back to OpenAI format.

A 1.5B model asked for a tool call in free text misspells names, drops braces or wraps the JSON
in prose often enough to waste retries. Here every reply is generated under a grammar compiled
from the tools' JSON schemas, so it always parses: `{"name": <tool>, "arguments": {...}}` (the
shape Qwen's chat template teaches) or `{"final": "..."}` for a plain answer. The tool schemas
themselves reach the model through the chat template's own `# Tools` block.

llama.cpp's schema-to-grammar converter handles type, properties/required, items/minItems,
enum, const, anyOf/oneOf/allOf, $ref and additionalProperties (absent means no extra keys, which
is what a tool that rejects unknown arguments wants). Keywords it does not know are dropped here
rather than risk a converter error: `pattern` (its regex support is partial), numeric bounds and
annotations. The tool still validates the arguments it receives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optimizer.models.tool_choice import allows_final, offered

NOTE_FILE = Path(__file__).with_name("reply_note.md")
_KEPT = {"type", "properties", "required", "items", "prefixItems", "minItems", "maxItems", "enum", "const",
         "anyOf", "oneOf", "allOf", "additionalProperties", "$ref", "format", "minLength", "maxLength"}
_NESTED_MAPS = {"properties"}
_NESTED_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
_ANY_VALUE = {"type": ["string", "number", "boolean", "object", "array", "null"]}
_DEFS = ("$defs", "definitions")


def reply_schema(tools: list[dict], tool_choice: Any = None) -> dict[str, Any]:
    """One JSON schema for the whole reply: a call of one of `tools`, or a final answer.

    `tool_choice` as in the OpenAI API: "required" leaves out the final answer, a named function
    allows only that tool, "none" (or no tools) allows only the final answer.
    """
    tools = offered(tools, tool_choice)
    alternatives, definitions = [], {}
    for tool in tools:
        function = tool.get("function", tool)
        parameters = dict(function.get("parameters") or {"type": "object", "properties": {}})
        for key in _DEFS:
            definitions.update({name: simplify(value) for name, value in (parameters.pop(key, None) or {}).items()})
        alternatives.append({"type": "object", "required": ["name", "arguments"], "properties": {
            "name": {"const": function["name"]}, "arguments": simplify(parameters)}})
    if allows_final(tools, tool_choice):
        alternatives.append({"type": "object", "required": ["final"], "properties": {"final": {"type": "string"}}})
    schema: dict[str, Any] = {"anyOf": alternatives}
    if definitions:
        schema["$defs"] = schema["definitions"] = definitions
    return schema


def simplify(schema: Any) -> Any:
    """Keep only the keywords the grammar converter supports; an unconstrained schema allows any value."""
    if not isinstance(schema, dict):
        return schema
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        if key not in _KEPT:
            continue
        if key in _NESTED_MAPS:
            value = {name: simplify(sub) for name, sub in value.items()}
        elif key in _NESTED_LISTS:
            value = [simplify(sub) for sub in value]
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            value = simplify(value)
        kept[key] = value
    return kept or dict(_ANY_VALUE)


def system_note(allow_final: bool = True) -> str:
    """How a reply must look; appended to the system prompt whenever tools are offered. The
    note file's second line (the plain-answer form) is left out when a tool call is required."""
    lines = NOTE_FILE.read_text(encoding="utf-8").strip().splitlines()
    return "\n".join(lines if allow_final else lines[:1])


def template_messages(messages: list[dict], note: str | None) -> list[dict]:
    """Messages as the chat template expects them: text content, tool arguments as objects
    (the template serializes them itself), and the reply note at the end of the system prompt."""
    shaped = [_shaped(message) for message in messages]
    if note:
        if shaped and shaped[0]["role"] == "system":
            shaped[0]["content"] = f"{shaped[0]['content']}\n\n{note}"
        else:
            shaped.insert(0, {"role": "system", "content": note})
    return shaped


def _shaped(message: dict) -> dict:
    shaped = {key: value for key, value in message.items() if key in ("role", "content", "tool_calls", "name")}
    content = shaped.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    shaped["content"] = content or ""
    if shaped.get("tool_calls"):
        shaped["tool_calls"] = [{"type": "function", "function": {
            "name": call["function"]["name"], "arguments": _loads(call["function"].get("arguments"))}}
            for call in shaped["tool_calls"]]
    return shaped


def _loads(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments or {}
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def to_message(text: str, call_id: str) -> tuple[dict[str, Any], str]:
    """The OpenAI assistant message and finish reason for a reply generated under `reply_schema`.

    A reply cut off by max_tokens is not valid JSON; it is returned as plain content so the
    agent's loop sees an answer without a tool call (and reminds the model) instead of a
    malformed reply that a retry would only reproduce.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {"role": "assistant", "content": text}, "length"
    if "final" in data:
        return {"role": "assistant", "content": data["final"]}, "stop"
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": data["name"], "arguments": json.dumps(data["arguments"], ensure_ascii=False)}}]}, \
        "tool_calls"
