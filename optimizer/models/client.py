"""The one way the harness, the agents and the judges call a model."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from optimizer.errors import DeadlinePassed, ModelCallError, TrialTimeout
from optimizer.ledger import charged, estimate_tokens
from optimizer.models import mock, routing
from optimizer.models._context import ALLOWED_TOOLS_KEY, METADATA_KEY
from optimizer.models._litellm import litellm_loaded, litellm_module
from optimizer.models.providers import provider_of
from optimizer.models.tool_choice import offered as offered_tools
from optimizer.types import Usage

RETRYABLE_STATUS = {408, 409, 425, 429}
SLOW_SHARE = 1 / 4
"""A trial whose model delivered under this share of its normal tokens/s was slowed by the
machine or the server, not by the agent (see `ModelClient.spoiled`)."""
RATE_WINDOW = 256
"""Calls of a model whose tokens/s make its normal rate (the most recent ones)."""
RATE_MIN_CALLS = 8
"""Completed calls of a model before its normal rate is known."""
GENERATING_AT_DEADLINE = "the local model was still generating at the trial's deadline"
"""What a provider puts in the time-out it raises when the trial's deadline stops a generation
under way: the model was answering (the agent used up the time), unlike a model that never got
to answer. The trial then ends as when its deadline passes between two calls."""


class ResponseCache(Protocol):
    def get(self, key: str) -> dict[str, Any] | None: ...

    def put(self, key: str, model: str, value: dict[str, Any]) -> None: ...


class MalformedResponse(Exception):
    """The model answered, but not in a shape we can use (e.g. tool arguments that are not JSON)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for transient faults: timeouts, 429 (honouring retry-after), 5xx, malformed replies.
    `max_attempts` and `base_delay_s` are the settings `retry_attempts` and `retry_base_delay`."""

    max_attempts: int
    base_delay_s: float
    max_delay_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.max_delay_s, self.base_delay_s * (2 ** attempt)) * (0.75 + 0.5 * random.random())
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.max_delay_s))
        return backoff


@dataclass(frozen=True)
class ToolCallRequest:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Completion:
    """A parsed model reply."""
    content: str | None
    tool_calls: list[ToolCallRequest]
    usage: Usage
    cached: bool = False
    latency_s: float = 0.0
    cut_off: bool = False  # the reply stopped at its length limit (finish reason "length")

    @property
    def message(self) -> dict[str, Any]:
        """The reply as an OpenAI-format assistant message, for the conversation history."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
                for call in self.tool_calls
            ]
        return message

    def to_cache(self) -> dict[str, Any]:
        return {"content": self.content,
                "tool_calls": [call.__dict__ for call in self.tool_calls],
                "usage": self.usage.model_dump(), "cut_off": self.cut_off}

    @classmethod
    def from_cache(cls, value: dict[str, Any]) -> "Completion":
        return cls(content=value["content"],
                   tool_calls=[ToolCallRequest(**call) for call in value["tool_calls"]],
                   usage=Usage(cache_hits=1), cached=True, cut_off=bool(value.get("cut_off")))


def cache_key(model: str, messages: list[dict], tools: list[dict] | None, params: dict,
              trial_index: int, variant: str | None = None) -> str:
    """Hash of the sorted request; the trial index makes repeated trials separate samples. A
    `variant` (see `ModelClient.variant`) is hashed too; without one the key is what it always was."""
    request = {"model": model, "messages": messages, "tools": tools or [], "params": params, "trial": trial_index}
    if variant is not None:
        request["variant"] = variant
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class ModelClient:
    """A model string with its role, cache, retry policy and, once bound, its trial.

    Every call made through a client adds to `usage`; the runner binds one client per trial
    (`bind`) so a trial's transcript carries exactly its own tokens and cost.
    """

    model: str
    role: str = "agent"
    cache: ResponseCache | None = None
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(1, 0.0))  # one try; the runner gives its own
    temperature: float | None = None
    seed: int | None = None
    trial_key: str | None = None
    run_id: str | None = None
    trial_index: int = 0
    deadline: float | None = None
    usage: Usage = field(default_factory=Usage)
    model_s: float = 0.0
    """Seconds this client spent inside model calls (waiting, generating, retrying), a call cut
    by the deadline included; cache hits take none."""
    in_process: bool = False
    """Answer `mock/*` models here instead of through litellm (`suites validate`, which replays
    reference solutions and must not pay litellm's import)."""
    variant: str | None = None
    """What decides the answer besides the request (`mock/sim`'s noise mode, see
    `mock.answer_variant`); part of the cache key, so one mode's answers are never served to the other."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bind(self, *, trial_key: str, trial_index: int, deadline: float | None,
             run_id: str | None = None) -> "ModelClient":
        return replace(self, trial_key=trial_key, trial_index=trial_index, deadline=deadline, run_id=run_id,
                       usage=Usage(), model_s=0.0, _lock=threading.Lock())

    def spoiled(self, elapsed: float) -> str | None:
        """Why the machine or the model server, not the agent, used up this trial's time (`elapsed`
        seconds), or None.

        Called when a trial's deadline has passed. The agent's share of the time is what it
        controls: its turns and the tokens it asks for, at the rate this model normally delivers
        them (`normal_rate`), and its own tools. When most of the time was spent in model calls,
        not one call completing, or the calls delivering under `SLOW_SHARE` of that rate (a queued
        server, a busy machine), means the time went to the infrastructure; an agent looping
        through many turns at the normal rate pays for them."""
        if self.model_s < elapsed / 2:
            return None  # the time went to the agent's own work
        completed = self.usage.calls + self.usage.cache_hits
        if completed == 0:
            return f"no call to {self.model} completed in {self.model_s:.0f} s of waiting for it"
        normal = normal_rate(self.model)
        rate = self.usage.completion_tokens / self.model_s if self.model_s > 0 else math.inf
        if normal is not None and rate < SLOW_SHARE * normal:
            return (f"{self.model} delivered {rate:.1f} tokens/s over this trial's {completed} call(s), "
                    f"under {SLOW_SHARE:.0%} of its normal {normal:.1f} tokens/s")
        return None

    def remaining(self, *, retrying: bool = False) -> float | None:
        """Seconds left before the trial's deadline. Past it, a first attempt means the model
        answered every earlier call and the agent used up the time (`DeadlinePassed`: the trial is
        failed, unless `spoiled` finds the model far slower than normal); a retry means the model
        was failing to answer (`TrialTimeout`: errored)."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left > 0:
            return left
        if retrying:
            raise TrialTimeout("the trial ran past its timeout_seconds while a model call was failing",
                               fix="check the provider, or raise timeout_seconds in the task file")
        raise DeadlinePassed("ran past timeout_seconds while the model kept answering")

    def complete(self, messages: list[dict], tools: list[dict] | None = None, *,
                 max_tokens: int | None = None, temperature: float | None = None,
                 tool_choice: str | dict | None = None) -> Completion:
        """One model call. `tool_choice="required"` asks for a tool call rather than a text answer
        (OpenAI semantics; providers that cannot enforce it ignore it). An OpenAI `allowed_tools`
        choice offers only the tools it names (see `_narrowed`)."""
        params = {k: v for k, v in {"temperature": self.temperature if temperature is None else temperature,
                                    "seed": self.seed, "max_tokens": max_tokens,
                                    "tool_choice": tool_choice if tools else None}.items() if v is not None}
        key = cache_key(self.model, messages, tools, params, self.trial_index, self.variant)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                completion = Completion.from_cache(hit)
                self._account(completion.usage)
                return completion
        direct = mock.served_in_process(self.model, self.in_process)
        if not direct:
            self._load_litellm()
        started = time.monotonic()
        try:
            with charged(self.role, self.model, estimate_tokens(messages, tools), max_tokens,
                         run_id=self.run_id) as charge:
                completion = self._call_with_retries(messages, tools, params, direct)
                charge.usage = completion.usage
        finally:
            with self._lock:
                self.model_s += time.monotonic() - started
        cost = charge.cost_usd
        if cost is not None and cost != completion.usage.cost_usd:  # priced by `model_prices`: the trial carries it too
            self._account(Usage(cost_usd=cost - completion.usage.cost_usd))
            completion.usage.cost_usd = cost
        if self.cache is not None:
            self.cache.put(key, self.model, completion.to_cache())
        return completion

    def _load_litellm(self) -> None:
        """Import litellm for the first call the cache does not answer (a fully cached run never
        pays for it). Waiting for that import is not the trial's time: its deadline moves back
        by the wait."""
        if litellm_loaded():
            return
        started = time.monotonic()
        litellm_module()
        if self.deadline is not None:
            self.deadline += time.monotonic() - started

    def _call_with_retries(self, messages, tools, params, direct: bool) -> Completion:
        send = None if direct else _sender(self.model)
        last_error: Exception | None = None
        for attempt in range(self.retry.max_attempts):
            remaining = self.remaining(retrying=attempt > 0)
            started = time.monotonic()
            try:
                metadata = {METADATA_KEY: self.trial_key}
                sent, offered, sent_params = _narrowed(self.model, tools, params, metadata)
                response = mock.in_process(self.model, messages, metadata) if direct else send(
                    model=self.model, messages=messages, tools=sent or None, timeout=remaining,
                    metadata=metadata, **sent_params)
                completion = _parse(response, offered)
            except Exception as exc:  # classified below; anything else is not retried
                if attempt == 0 and _cut_by_deadline(exc, self.deadline):
                    # the model was still answering when the trial's time ran out: judged as when
                    # the deadline passes between two calls (the runner asks `spoiled` whose time it was)
                    raise DeadlinePassed("ran past timeout_seconds while the model kept answering") from exc
                if not _is_retryable(exc):
                    raise ModelCallError(f"{self.model}: {type(exc).__name__}: {_short(exc)}") from exc
                last_error = exc
                if attempt + 1 < self.retry.max_attempts:
                    self._sleep(self.retry.delay(attempt, _retry_after(exc)))
                continue
            completion.latency_s = time.monotonic() - started
            self._account(completion.usage)
            _record_rate(self.model, completion.usage.completion_tokens, completion.latency_s)
            return completion
        raise ModelCallError(
            f"{self.model}: gave up after {self.retry.max_attempts} attempts; "
            f"last error {type(last_error).__name__}: {_short(last_error)}")

    def _sleep(self, seconds: float) -> None:
        remaining = self.remaining(retrying=True)
        if remaining is not None and seconds >= remaining:
            raise TrialTimeout("the trial ran out of time while waiting to retry a model call")
        time.sleep(seconds)

    def _account(self, usage: Usage) -> None:
        with self._lock:
            self.usage.add(usage)


_rates_lock = threading.Lock()
_rates: dict[str, deque[float]] = {}


def _record_rate(model: str, tokens: int, seconds: float) -> None:
    """Remember a completed call's tokens/s (latency included: a queued call is a slow call)."""
    if tokens > 0 and seconds > 0:
        with _rates_lock:
            _rates.setdefault(model, deque(maxlen=RATE_WINDOW)).append(tokens / seconds)


def normal_rate(model: str) -> float | None:
    """The tokens/s `model` normally delivers to this process: the upper quartile of its last
    `RATE_WINDOW` completed calls (it stays at the quiet rate while a quarter of those calls
    were quiet ones), or None before `RATE_MIN_CALLS` calls."""
    with _rates_lock:
        rates = sorted(_rates.get(model, ()))
    if len(rates) < RATE_MIN_CALLS:
        return None
    return rates[(3 * len(rates)) // 4]


def forget_rates() -> None:
    """Start every model's normal rate afresh (tests)."""
    with _rates_lock:
        _rates.clear()


def _sender(model: str) -> Callable[..., Any]:
    """What sends a call: for a name of the models file its Router, whose retries take a failed
    call to another deployment (a server gone mid-call, 5xx, 429); else `litellm.completion` with
    litellm's own retries off, since `_call_with_retries` does them."""
    if routing.routes(model):
        return routing.completion
    provider_of(model)  # registers a provider declared by an entry point before litellm is asked
    return functools.partial(litellm_module().completion, num_retries=0)


def _parse(response: Any, tools: list[dict] | None) -> Completion:
    if not getattr(response, "choices", None):  # a 200 with no choice (a server under load): retried
        raise MalformedResponse("the reply holds no choice")
    choice = response.choices[0]
    message = choice.message
    allowed = {tool["function"]["name"] for tool in tools or []}
    calls = []
    for raw in getattr(message, "tool_calls", None) or []:
        name = raw.function.name
        if name not in allowed:
            raise MalformedResponse(f"call to unknown tool {name!r}")
        try:
            arguments = json.loads(raw.function.arguments or "{}")
        except (TypeError, json.JSONDecodeError) as exc:
            raise MalformedResponse(f"arguments of {name!r} are not valid JSON: {exc}") from exc
        if not isinstance(arguments, dict):
            raise MalformedResponse(f"arguments of {name!r} are not a JSON object")
        calls.append(ToolCallRequest(id=raw.id or f"call_{len(calls)}", name=name, arguments=arguments))
    usage_obj = getattr(response, "usage", None)
    details = getattr(usage_obj, "prompt_tokens_details", None)
    hidden = getattr(response, "_hidden_params", {}) or {}
    usage = Usage(
        prompt_tokens=getattr(usage_obj, "prompt_tokens", 0) or 0,
        completion_tokens=getattr(usage_obj, "completion_tokens", 0) or 0,
        cached_prompt_tokens=getattr(details, "cached_tokens", 0) or 0,
        cost_usd=float(hidden.get("response_cost") or 0.0),
        calls=1,
    )
    return Completion(content=message.content, tool_calls=calls, usage=usage, cut_off=choice.finish_reason == "length")


def _narrowed(model: str, tools: list[dict] | None, params: dict[str, Any],
              metadata: dict[str, Any]) -> tuple[list[dict] | None, list[dict] | None, dict[str, Any]]:
    """What to send for an OpenAI `allowed_tools` choice, which litellm passes only to a few
    providers: the tools to list, the tools a reply may call, and the parameters. An entry of
    the choice may carry `parameters`, a narrower schema of that tool's arguments for this call
    (paths that exist, say). A provider that `lists_every_tool` (the embedded model, whose cached
    prompt prefix then holds) gets every tool as declared and the choice itself in `metadata`;
    any other model gets the allowed tools alone, narrowed. The choice's mode becomes the
    `tool_choice`."""
    choice = params.get("tool_choice")
    if not (isinstance(choice, dict) and choice.get("type") == "allowed_tools") or not tools:
        return tools, tools, params
    offered = offered_tools(tools, choice)
    params = {**params, "tool_choice": (choice.get("allowed_tools") or {}).get("mode", "auto")}
    provider = provider_of(model)
    if provider is not None and provider.lists_every_tool:
        metadata[ALLOWED_TOOLS_KEY] = choice
        return tools, offered, params
    return offered, offered, params


def _cut_by_deadline(exc: Exception, deadline: float | None) -> bool:
    """The model was stopped mid-answer by the trial's deadline, as its provider says with
    `GENERATING_AT_DEADLINE`. (A hosted model's time-out says nothing of whether it was
    answering, so it is retried like any other.)"""
    return deadline is not None and time.monotonic() >= deadline and GENERATING_AT_DEADLINE in str(exc)


def _is_retryable(exc: Exception) -> bool:
    if isinstance(exc, MalformedResponse):
        return True
    name = type(exc).__name__
    if name in {"Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError",
                "InternalServerError", "ServiceUnavailableError", "BadGatewayError"}:
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status in RETRYABLE_STATUS or status >= 500)


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "litellm_response_headers", None)
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _short(exc: Exception | None) -> str:
    return (str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else "")[:300]
