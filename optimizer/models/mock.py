"""Built-in in-process providers, served through litellm like any remote model.

* `mock/oracle` replays the task's `reference_solution.tool_calls`, one per turn, then answers
  with a short final message. Every task of a suite must score 1.0 with it. Both it and
  `mock/sim` make their calls in the order the agent asks for them (`AgentEntry.replay`, which
  comes with the trial as `TrialContext.replay`: the PKM Agent's `keep_note` first).
* `mock/sim` plays the agent as its registered `SimProfile` says (see `optimizer.trials.sim`): seeded,
  prompt-sensitive, reproducible.

* As judge models, `mock/oracle` and `mock/sim` answer with the judge's documented offline
  heuristic (see `optimizer.trials.judging`), so suites with LLM judges run without a model.

* `mock/patcher` answers the `llm` proposer from a JSON script (`mock_patcher_script`): a list
  of proposals `{"rationale": ..., "edits": [{"search": ..., "replace": ...}]}`, the n-th answer
  for the n-th proposal recorded in the store; past the end of the script it proposes no edit.
  An entry `{"raw": "..."}` is returned verbatim (a reply no parser can use); an entry with a
  `"rule"` answers the `rule` patch format, one with a `"kind"` a guided contrast request; an
  entry's `"after_feedback"` (another entry) is the answer once the proposer sends feedback on
  the first.
* `mock/patcher` with `mock_patcher_skill` set (and no script) is a weak patcher: it reads the
  targeted buckets from the request inside the proposer's prompt and, from a seeded draw,
  proposes the rule `mock/sim` recognises for them (probability `skill`), that rule plus one
  contradicting another bucket of the agent (a harmful patch), or a distractor (a useless one);
  see `optimizer.proposal.weak_patcher`. It answers in the patch format the proposer asked for: the
  sentences as one `rule`, as one `kind` phrase, or as list items appended by one edit with an
  empty `search`.

All accept a latency suffix for benchmarks, e.g. `mock/oracle@50ms` sleeps 50 ms per call.
`in_process` answers the same way without litellm, for `optimizer suites validate`: the oracle
replays reference solutions, so nothing there is a model call worth litellm's import time.
Token counts are estimated as characters / 4 so reports have something to show; cost is 0.

What the mocks play is owned above the model layer, which imports nothing from there: the agent's
`SimProfile` comes with the trial (`TrialContext.sim_profile`), and the judges' offline answers
and the weak patcher are installed with `play` by the modules that own them (`optimizer.trials.judging`,
`optimizer.proposal.proposers`) when they are imported.
"""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from optimizer.errors import ModelConfigError
from optimizer.models._context import (JUDGE_INPUTS_KEY, JUDGE_KEY, METADATA_KEY, PROPOSAL_KEY, SCRIPT_KEY,
                                      SEED_KEY, SKILL_KEY, trial_context)
from optimizer.models.providers import Provider, price_as_free, provider_of, register_provider

MOCK_NAMES = ("oracle", "sim", "patcher")
_MODEL = re.compile(r"^(?P<name>[a-z_]+)(@(?P<ms>\d+)ms)?$")
FINAL_REPLY = "Done."
_players: dict[str, Callable[..., Any]] = {}


def play(role: str, player: Callable[..., Any]) -> None:
    """Install what the mock models answer as `role`: "judge" (`(judge name, inputs) -> reply
    text`) or "weak_patcher" (`(request, *, skill, seed, ordinal, attempt) -> answer` with `kind`,
    `targets` and `rules`)."""
    _players[role] = player


def _player(role: str) -> Callable[..., Any]:
    if role not in _players:
        raise ValueError(f"no mock {role} is installed (the module that owns it installs it with `mock.play`)")
    return _players[role]


def parse_mock_model(model: str) -> tuple[str, float] | None:
    """`oracle@50ms` -> ('oracle', 0.05); None when the name is not a known mock."""
    match = _MODEL.match(model)
    if not match or match["name"] not in MOCK_NAMES:
        return None
    return match["name"], int(match["ms"] or 0) / 1000


def _completion(model: str, messages: list[dict], **kwargs: Any):
    parsed = parse_mock_model(model)
    if parsed is None:
        raise ValueError(f"unknown mock model 'mock/{model}'")
    name, latency = parsed
    if latency:
        time.sleep(latency)
    metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
    if name == "patcher":
        return _response(model, messages, {"role": "assistant", "content": _patcher_reply(metadata, messages)},
                         "stop")
    if metadata.get(JUDGE_KEY):
        reply = _player("judge")(metadata[JUDGE_KEY], metadata.get(JUDGE_INPUTS_KEY) or {})
        return _response(model, messages, {"role": "assistant", "content": reply}, "stop")
    context = trial_context(metadata.get(METADATA_KEY))
    if context is None:
        raise ValueError(f"mock/{name} needs a registered trial (metadata {METADATA_KEY!r})")
    message, finish = scripted_reply(_script(name, context, messages), messages)
    return _response(model, messages, message, finish)


def scripted_reply(calls: list, messages: list[dict]) -> tuple[dict[str, Any], str]:
    """The next of a script's tool calls (those the conversation's assistant turns have not made
    yet) as an OpenAI assistant message and finish reason; the final reply once all are made. A
    call whose answer asked for it again ("call <tool> again", as the PKM Agent's `file_note`
    answers with a file it has not read) is made again, as a model that follows the answer would."""
    made = sum(1 for message in messages if message.get("role") == "assistant")
    turn = made - _asked_again(messages)
    if turn >= len(calls):
        return {"role": "assistant", "content": FINAL_REPLY}, "stop"
    call = calls[turn]
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": f"call_{made}", "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}]}, "tool_calls"


def _asked_again(messages: list[dict]) -> int:
    """How many of the conversation's tool answers asked for the same call again."""
    return sum(1 for message in messages if message.get("role") == "tool"
               and f"call {message.get('name')} again" in str(message.get("content") or "").lower())


def _response(model: str, messages: list[dict], message: dict, finish: str) -> dict[str, Any]:
    """The reply as an OpenAI-format response body."""
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4
    completion_tokens = len(json.dumps(message, ensure_ascii=False)) // 4
    return {"model": f"mock/{model}", "choices": [{"message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def answer_variant(model: str, sim_noise: str) -> str | None:
    """What decides `model`'s answers besides the request, so the response cache never serves an
    answer made under another: `mock/sim`'s noise mode; for models outside this module, the
    version of litellm, which parses their replies, and what the model's provider adds
    (`Provider.answer_variant`: for the embedded model the llama.cpp build that serves it), so an
    upgrade runs the calls again rather than reuse replies the old version made or parsed."""
    if not model.startswith("mock/"):
        provider = provider_of(model)
        own = provider.answer_variant(model) if provider is not None and provider.answer_variant else None
        return reply_packages() if own is None else f"{reply_packages()},{own}"
    return f"sim_noise={sim_noise}" if is_simulator(model) else None


def is_simulator(model: str) -> bool:
    """Whether `model` is the simulator `mock/sim` (with or without a latency: `mock/sim@20ms`),
    whose outcomes follow an agent's `SimProfile` and its `sim_*` settings."""
    parsed = parse_mock_model(model.removeprefix("mock/")) if model.startswith("mock/") else None
    return parsed is not None and parsed[0] == "sim"


@functools.cache
def reply_packages(names: tuple[str, ...] = ("litellm",)) -> str:
    """`litellm==1.2.3,dspy==3.0.1` for the installed ones among `names`."""
    from importlib import metadata

    found = []
    for name in names:
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ",".join(found)


def served_in_process(model: str, in_process: bool) -> bool:
    """Whether a caller asked to answer models in process (`in_process`) answers `model` here:
    only `mock/*` models are; any other still goes through litellm."""
    return in_process and model.startswith("mock/")


def in_process(model: str, messages: list[dict], metadata: dict[str, Any]) -> SimpleNamespace:
    """What litellm would return for `mock/<model>`, answered here: the same body, read through
    attributes like a litellm response."""
    return _attributes(_completion(model.removeprefix("mock/"), messages,
                                   litellm_params={"metadata": metadata}))


def _attributes(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**{key: _attributes(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_attributes(item) for item in value]
    return value


SCRIPT_ENTRY_KEYS = {"rationale", "edits", "rule", "kind", "raw", "after_feedback"}


def check_patcher_script(path: str) -> None:
    """Refuse a `mock_patcher_script` the patcher could not answer from, before anything runs."""
    from optimizer.errors import ConfigError
    from optimizer.files import parse_json, read_input

    fix = ('a JSON list of proposals such as [{"rationale": "...", "edits": [{"search": "...", "replace": "..."}]}] '
           '(see optimizer/models/mock.py)')

    def bad(message: str, field: str = "mock_patcher_script") -> ConfigError:
        return ConfigError(message, path=path, field=field, fix=fix)

    text = read_input(Path(path), ConfigError, field="mock_patcher_script")
    script = parse_json(text, path, ConfigError, field="mock_patcher_script", fix=fix)
    if not isinstance(script, list):
        raise bad(f"the script must be a list of proposals, not a JSON {type(script).__name__}")

    def check(entry: object, where: str) -> None:
        if not isinstance(entry, dict):
            raise bad("a proposal must be a JSON object", field=where)
        unknown = set(entry) - SCRIPT_ENTRY_KEYS
        if unknown:
            raise bad(f"unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(SCRIPT_ENTRY_KEYS))}",
                      field=where)
        for key in ("rationale", "rule", "kind", "raw"):
            if key in entry and not isinstance(entry[key], str):
                raise bad("must be a string", field=f"{where}.{key}")
        edits = entry.get("edits", [])
        if not isinstance(edits, list) or not all(
                isinstance(edit, dict) and set(edit) == {"search", "replace"}
                and all(isinstance(value, str) for value in edit.values()) for edit in edits):
            raise bad('must be a list of {"search": "...", "replace": "..."} objects', field=f"{where}.edits")
        if "after_feedback" in entry:
            check(entry["after_feedback"], f"{where}.after_feedback")

    for index, entry in enumerate(script):
        check(entry, f"[{index}]")


def _patcher_reply(metadata: dict, messages: list[dict]) -> str:
    path = metadata.get(SCRIPT_KEY)
    ordinal = int(metadata.get(PROPOSAL_KEY) or 1)
    if path:
        script = json.loads(Path(path).read_text(encoding="utf-8"))
        entry = script[ordinal - 1] if 0 < ordinal <= len(script) else {
            "rationale": "The script has no more proposals.", "edits": []}
        if "after_feedback" in entry and _feedback_given(messages):
            entry = entry["after_feedback"]
    elif metadata.get(SKILL_KEY) is not None:
        entry = _weak_entry(metadata, messages, ordinal)
    else:
        raise ValueError("mock/patcher needs a script (mock_patcher_script) or a skill (mock_patcher_skill)")
    if "raw" in entry:
        return str(entry["raw"])
    if "kind" in entry:  # the answer to a guided contrast request (its kind of input only)
        return f"[[ ## kind ## ]]\n{entry['kind']}\n\n[[ ## completed ## ]]"
    if "rule" in entry:  # the answer to the `rule` patch format
        return (f"[[ ## rationale ## ]]\n{entry.get('rationale', '')}\n\n[[ ## rule ## ]]\n{entry['rule']}\n\n"
                f"[[ ## completed ## ]]")
    edits = json.dumps(entry.get("edits", []), ensure_ascii=False)
    return (f"[[ ## rationale ## ]]\n{entry.get('rationale', '')}\n\n[[ ## edits ## ]]\n{edits}\n\n"
            f"[[ ## completed ## ]]")


def _weak_entry(metadata: dict, messages: list[dict], ordinal: int) -> dict:
    """The weak patcher's answer as a script entry, in the patch format the proposer asked for."""
    request = _request_text(messages)
    answer = _player("weak_patcher")(request, skill=float(metadata[SKILL_KEY]), seed=int(metadata.get(SEED_KEY) or 0),
                         ordinal=ordinal, attempt=1 if _feedback_given(messages) else 0)
    rationale = f"A {answer.kind} answer for {', '.join(answer.targets) or 'no known bucket'}."
    system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
    if "[[ ## kind ## ]]" in system:
        return {"kind": answer.phrase}
    if "[[ ## rule ## ]]" in system:
        return {"rationale": rationale, "rule": " ".join(answer.rules)}
    edits = [{"search": "", "replace": "\n".join(f"- {rule}" for rule in answer.rules)}] if answer.rules else []
    return {"rationale": rationale, "edits": edits}


def _request_text(messages: list[dict]) -> str:
    """The `request` field of the proposer's prompt (the text of request.md)."""
    text = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    _, _, rest = text.partition("[[ ## request ## ]]")
    return rest.split("[[ ## feedback ## ]]", 1)[0].strip("\n")


def _feedback_given(messages: list[dict]) -> bool:
    """Whether the proposer sent its `feedback` field filled (a second attempt)."""
    text = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    _, marker, rest = text.rpartition("[[ ## feedback ## ]]")
    return bool(marker) and bool(rest.split("Respond with the corresponding output fields", 1)[0].strip())


def _script(name: str, context, messages: list[dict]):
    """The calls `mock/oracle` (the task's reference calls) or `mock/sim` (its profile's play)
    makes, in the order the agent asks for them (`TrialContext.replay`)."""
    task = context.task
    if name == "oracle":
        calls = task.reference_calls()
    else:
        profile = context.sim_profile
        if profile is None:
            raise ValueError(f"agent {context.agent_name!r} has no sim profile; mock/sim cannot play it")
        system = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        calls = profile.play(task, system, context.seed, context.trial_index, context.sim_noise)
    return context.replay(task, calls) if context.replay else calls


def _make_handler():
    from litellm import CustomLLM
    from litellm.types.utils import ModelResponse

    class OptimizerMockLLM(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            response = ModelResponse(**_completion(model, messages, **kwargs))
            response._hidden_params["response_cost"] = 0.0  # known: litellm need not look the model up
            return response

    return OptimizerMockLLM()


def _check(model: str, field: str) -> None:
    if parse_mock_model(model.removeprefix("mock/")) is None:
        raise ModelConfigError(f"unknown mock model {model!r}", field=field,
                               fix=f"use one of: {', '.join('mock/' + n for n in MOCK_NAMES)}")


def _validate(model: str, field: str) -> None:
    price_as_free("mock", model)  # a latency suffix makes a model string of its own


register_provider("mock", Provider(handler=_make_handler, models=tuple(f"mock/{name}" for name in MOCK_NAMES),
                                   check=_check, validate=_validate))
