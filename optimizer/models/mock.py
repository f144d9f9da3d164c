"""Built-in in-process providers, served through litellm like any remote model.

* `mock/oracle` replays the task's `reference_solution.tool_calls`, one per turn, then answers
  with a short final message. Every task of a suite must score 1.0 with it.
* `mock/sim` plays the agent as its registered `SimProfile` says (see `optimizer.sim`): seeded,
  prompt-sensitive, reproducible.

Both accept a latency suffix for benchmarks, e.g. `mock/oracle@50ms` sleeps 50 ms per call.
Token counts are estimated as characters / 4 so reports have something to show; cost is 0.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from optimizer.models._context import METADATA_KEY, trial_context
from optimizer.models._litellm import register_provider

MOCK_NAMES = ("oracle", "sim")
_MODEL = re.compile(r"^(?P<name>[a-z_]+)(@(?P<ms>\d+)ms)?$")
FINAL_REPLY = "Done."


def parse_mock_model(model: str) -> tuple[str, float] | None:
    """`oracle@50ms` -> ('oracle', 0.05); None when the name is not a known mock."""
    match = _MODEL.match(model)
    if not match or match["name"] not in MOCK_NAMES:
        return None
    return match["name"], int(match["ms"] or 0) / 1000


def _completion(model: str, messages: list[dict], **kwargs: Any):
    from litellm.types.utils import ModelResponse

    parsed = parse_mock_model(model)
    if parsed is None:
        raise ValueError(f"unknown mock model 'mock/{model}'")
    name, latency = parsed
    if latency:
        time.sleep(latency)
    key = ((kwargs.get("litellm_params") or {}).get("metadata") or {}).get(METADATA_KEY)
    context = trial_context(key)
    if context is None:
        raise ValueError(f"mock/{name} needs a registered trial (metadata {METADATA_KEY!r})")
    calls = _script(name, context, messages)
    turn = sum(1 for message in messages if message.get("role") == "assistant")
    if turn < len(calls):
        call = calls[turn]
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{turn}", "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}]}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": FINAL_REPLY}
        finish = "stop"
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
    completion_tokens = len(json.dumps(message, ensure_ascii=False)) // 4
    return ModelResponse(model=f"mock/{model}", choices=[{"message": message, "finish_reason": finish}],
                         usage={"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                "total_tokens": prompt_tokens + completion_tokens})


def _script(name: str, context, messages: list[dict]):
    task = context.task
    if name == "oracle":
        return task.reference_solution.tool_calls if task.reference_solution else []
    from optimizer.registry import get_agent
    from optimizer.sim import decide

    profile = get_agent(context.agent_name).sim_profile
    if profile is None:
        raise ValueError(f"agent {context.agent_name!r} has no sim profile; mock/sim cannot play it")
    system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
    return decide(profile, task, system, context.seed, context.trial_index).calls


def _make_handler():
    from litellm import CustomLLM

    class OptimizerMockLLM(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            return _completion(model, messages, **kwargs)

    return OptimizerMockLLM()


register_provider("mock", _make_handler, [f"mock/{name}" for name in MOCK_NAMES])
