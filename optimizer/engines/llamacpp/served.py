"""One process's calls to the shared `llama-server` of the embedded model, as a litellm handler.

* **Slots.** The server decodes `slots` sequences together (continuous batching); the runner runs
  that many trials at once (`local_slots` setting, default 1). On 2 cores one slot is fastest:
  prompt evaluation gains nothing from batching, grammar-constrained sampling is done one
  sequence after the other, and each new slot evaluates the shared prefix once more
  (docs/scale-out.md has the figures).
* **One prompt, rendered here.** The conversation is rendered with the model's own chat template
  (read from the server's `/props`, rendered with jinja2 as Hugging Face's transformers do), the
  tool schemas in the template's `# Tools` block right after the system prompt, and sent to
  `/completion` with a JSON schema the reply must satisfy (see `optimizer.engines.llamacpp.grammar`):
  every tool call parses.
* **Prefix reuse.** The server keeps each slot's KV cache and evaluates only what follows the
  longest common prefix with the slot's previous prompt, and sends a request to the slot whose
  cache shares most of it. Every call of a suite starts with the same system prompt and tools,
  so that prefix stays cached; `prompt_tokens_details.cached_tokens` reports how much was reused.
* **Deadlines.** Replies are streamed; a trial whose deadline passes while the model generates
  closes the stream (the server stops that sequence) and raises litellm's `Timeout`; one that
  passes while the request waits for a free slot does too, with another message.
* **A server that dies** (killed, crashed) is restarted by its supervisor; the call it cut is
  sent again once the server answers, and only a second failure reaches the client's retries.
* temperature 0 is greedy; unset, Qwen's recommended sampling (0.7, top_p 0.8, top_k 20) is used.
  The seed is mixed with the trial index, so repeated trials are separate samples. Cost is 0.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from optimizer.engines import llamacpp
from optimizer.engines.llamacpp import MODEL, NAME, PREFIX, grammar, server
from optimizer.models import ALLOWED_TOOLS_KEY, GENERATING_AT_DEADLINE
from optimizer.models._context import METADATA_KEY, trial_context
from optimizer.models.tool_choice import allows_final, offered as offered_tools

DEFAULT_MAX_TOKENS = 512
QWEN_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
"""Qwen2.5's generation_config; used when the caller sets no temperature."""
CONNECT_TIMEOUT_S = 10.0


@dataclass
class Reply:
    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


class ServedModel:
    """Calls of this process to the shared server: one HTTP connection pool, the chat template."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._http: Any = None
        self._templates: dict[str, Any] = {}

    def complete(self, messages: list[dict], *, tools: list[dict] | None = None, max_tokens: int | None = None,
                 temperature: float | None = None, seed: int | None = None, response_format: dict | None = None,
                 tool_choice: Any = None, deadline: float | None = None) -> Reply:
        # the prompt lists every tool, so narrowing the choice keeps the cached prefix; the
        # schema allows only the offered ones
        listed = tools if isinstance(tool_choice, dict) and tool_choice.get("type") == "allowed_tools" else None
        offered = offered_tools(tools, tool_choice)
        note = grammar.system_note(allows_final(offered, tool_choice)) if offered else None
        sampling = dict(QWEN_SAMPLING) if temperature is None else {"temperature": temperature}
        body = {"n_predict": max_tokens or DEFAULT_MAX_TOKENS, "seed": -1 if seed is None else seed,
                "repeat_penalty": 1.0, "cache_prompt": True, "stream": True, **sampling}
        schema = _reply_schema(tools, tool_choice, response_format)
        if schema is not None:
            body["json_schema"] = schema
        for attempt in range(2):
            url = server.endpoint(llamacpp.spec(), fresh=attempt > 0)
            try:
                body["prompt"] = self._template(url).render(grammar.template_messages(messages, note),
                                                            listed or offered or None)
                text, final = self._generate(url, body, deadline)
                break
            except _ServerGone as exc:
                if attempt:
                    raise _connection_error(str(exc)) from None
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        if offered:
            message, finish = grammar.to_message(text, f"call_{turn}")
        else:
            message = {"role": "assistant", "content": text}
            finish = "length" if final.get("stop_type") == "limit" else "stop"
        timings = final.get("timings") or {}
        return Reply(message=message, finish_reason=finish,
                     prompt_tokens=int(final.get("tokens_evaluated") or 0),
                     completion_tokens=int(final.get("tokens_predicted") or 0),
                     cached_tokens=int(timings.get("cache_n") or 0))

    def _generate(self, url: str, body: dict[str, Any], deadline: float | None) -> tuple[str, dict[str, Any]]:
        """Stream one completion; (the text, the server's last message with its token counts)."""
        import httpx

        wait = None if deadline is None else max(0.001, deadline - time.monotonic())
        pieces: list[str] = []
        started = False
        try:
            with self._client().stream("POST", f"{url}/completion", json=body,
                                       timeout=httpx.Timeout(wait, connect=CONNECT_TIMEOUT_S)) as response:
                if response.status_code != 200:
                    response.read()
                    raise _http_error(response.status_code, response.text)
                for line in response.iter_lines():  # `data: {...}` lines, and `:` pings when idle
                    if line.startswith("data: "):
                        chunk = json.loads(line[len("data: "):])
                        if "error" in chunk:  # a failure after the first token: its own status, not a lost server
                            error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": chunk["error"]}
                            raise _http_error(int(error.get("code") or 500), str(error.get("message") or error))
                        started = True
                        pieces.append(chunk.get("content") or "")
                        if chunk.get("stop"):
                            return "".join(pieces), chunk
                    if deadline is not None and time.monotonic() > deadline:
                        raise _timeout(GENERATING_AT_DEADLINE)  # leaving the block closes the stream
        except httpx.TimeoutException:
            # no first token yet: the request waited for a free slot, or its prompt was still being read
            raise _timeout(GENERATING_AT_DEADLINE if started else "the local model had not started its reply "
                           "(waiting for a free slot or reading the prompt) at the trial's deadline") from None
        except httpx.TransportError as exc:  # refused, reset or cut: the server is gone or restarting
            raise _ServerGone(f"{type(exc).__name__}: {exc}") from exc
        raise _ServerGone("the server ended the stream before the reply was complete")

    def _client(self) -> Any:
        with self._lock:
            if self._http is None:
                import httpx

                self._http = httpx.Client(limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
            return self._http

    def _template(self, url: str) -> "ChatTemplate":
        with self._lock:
            template = self._templates.get(url)
        if template is None:
            import httpx

            try:
                props = self._client().get(f"{url}/props", timeout=CONNECT_TIMEOUT_S).json()
            except httpx.TransportError as exc:
                raise _ServerGone(f"{type(exc).__name__}: {exc}") from exc
            template = ChatTemplate(props["chat_template"], bos=props.get("bos_token") or "",
                                    eos=props.get("eos_token") or "")
            with self._lock:
                self._templates[url] = template
        return template


class ChatTemplate:
    """The model's Jinja chat template, rendered the way Hugging Face's transformers render it: a
    sandboxed environment, `trim_blocks` and `lstrip_blocks`, loop controls, and a `tojson` that
    writes non-ASCII characters as they are."""

    def __init__(self, source: str, *, bos: str, eos: str) -> None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        environment.filters["tojson"] = _tojson
        environment.globals.update(raise_exception=_raise, strftime_now=lambda f: datetime.now().strftime(f))
        self._template = environment.from_string(source)
        self._bos, self._eos = bos, eos

    def render(self, messages: list[dict], tools: list[dict] | None) -> str:
        return self._template.render(messages=messages, tools=tools, add_generation_prompt=True,
                                     bos_token=self._bos, eos_token=self._eos)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise ValueError(message)


def _reply_schema(tools: list[dict] | None, tool_choice: Any, response_format: dict | None) -> dict | None:
    """The JSON schema the reply is generated under (the server compiles it to a grammar)."""
    if offered_tools(tools, tool_choice):
        return grammar.reply_schema(tools, tool_choice)
    if response_format and response_format.get("type") == "json_object":
        return grammar.simplify(response_format.get("schema") or {"type": "object"})
    if response_format and response_format.get("type") == "json_schema":
        return grammar.simplify((response_format.get("json_schema") or {}).get("schema") or {"type": "object"})
    return None


class _ServerGone(Exception):
    """The server did not answer or broke off (it is being restarted, or it crashed)."""


def _http_error(status: int, text: str) -> Exception:
    from litellm.exceptions import APIError, ServiceUnavailableError

    detail = text.strip()[:300]
    if status == 503:
        return ServiceUnavailableError(message=f"llama-server is busy: {detail}", model=MODEL, llm_provider=PREFIX)
    return APIError(status_code=status, message=f"llama-server answered {status}: {detail}", model=MODEL,
                    llm_provider=PREFIX)


def _connection_error(detail: str) -> Exception:
    from litellm.exceptions import APIConnectionError

    return APIConnectionError(message=f"the local model's server did not answer: {detail}", model=MODEL,
                              llm_provider=PREFIX)


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


_model = ServedModel()


def smoke_test() -> str:
    """Start (or find) the server and generate one token; a one-line report (used after installing)."""
    started = time.monotonic()
    url = server.endpoint(llamacpp.spec())
    loaded = time.monotonic() - started
    text, _ = _model._generate(url, {"prompt": "1 + 1 =", "n_predict": 1, "temperature": 0.0, "stream": True}, None)
    return f"server up in {loaded:.1f} s ({url}), answered {text!r} to '1 + 1 ='"


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


def make_handler():
    """The litellm `CustomLLM` answering `local/...` calls (the provider's handler)."""
    from litellm import CustomLLM

    class OptimizerLocalLLM(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            return _completion(model, messages, **kwargs)

    return OptimizerLocalLLM()

