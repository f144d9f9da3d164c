"""The model layer: every model call goes through litellm (only `suites validate` answers the
`mock/*` models in process; see `optimizer.models.mock`).

Built-in providers: `mock/oracle` and `mock/sim` (see `optimizer.models.mock`); others register
through `optimizer.models.providers` (the embedded `local/*` model among them, from its own
package). Any other litellm model string works (`openai/...`, `anthropic/...`, `ollama/...`), and
so does a `model_name` of the models file, served by several deployments (see
`optimizer.models.routing`).
"""

from __future__ import annotations

import importlib
from typing import Any

from optimizer.errors import ModelConfigError
from optimizer.models import mock
from optimizer.models import routing
from optimizer.models.mock import answer_variant, is_simulator
from optimizer.models._context import ALLOWED_TOOLS_KEY, TrialContext, register_trial, unregister_trial
from optimizer.models._litellm import litellm_module
from optimizer.models.providers import (Provider, configure_providers, price_as_free, provider_of, register_provider,
                                        registered_prefixes)

_CLIENT = ("GENERATING_AT_DEADLINE", "Completion", "MalformedResponse", "ModelClient", "ResponseCache", "RetryPolicy",
           "ToolCallRequest")
"""Names of `optimizer.models.client`, imported on first use (PEP 562): the client builds the data
types, which a command that only checks the model settings (`optimizer history`) does not need."""

__all__ = ["ALLOWED_TOOLS_KEY", "Completion", "GENERATING_AT_DEADLINE", "MalformedResponse", "ModelClient", "Provider",
           "ResponseCache", "RetryPolicy", "ToolCallRequest", "TrialContext", "answer_variant", "answered_in_process",
           "check_model_string", "concurrency_limit", "configure_providers", "context_window", "is_embedded",
           "is_simulator",
           "litellm_module", "price_as_free", "provider_of", "register_provider", "registered_prefixes",
           "register_trial", "unregister_trial", "validate_model"]


def __getattr__(name: str) -> Any:
    if name not in _CLIENT:
        raise AttributeError(f"module 'optimizer.models' has no attribute {name!r}")
    value = getattr(importlib.import_module("optimizer.models.client"), name)
    globals()[name] = value
    return value


def is_embedded(model: str) -> bool:
    """A model its provider runs on this machine (`Provider.embedded`: `local/*`)."""
    found = provider_of(model)
    return found is not None and found.embedded


def answered_in_process(model: str) -> bool:
    """A model answered by a provider registered in this process (`mock/*`, a plugin's), other
    than an embedded model and the models file's names."""
    found = provider_of(model)
    return found is not None and not found.embedded and not routing.routes(model)


def concurrency_limit(model: str) -> int | None:
    """How many calls `model` can serve at once when that is a property of the model (the
    embedded model's server decodes `local_slots` sequences at once; a name of the models file,
    the sum of its deployments' `max_parallel_requests`); None when only the caller's setting
    limits it."""
    found = None if routing.routes(model) else provider_of(model)
    if found is not None:
        return found.concurrency(model) if found.concurrency else None
    return routing.concurrency(model)


def context_window(model: str) -> int | None:
    """The context length in tokens when the model's provider sets it (the embedded model); else None."""
    found = None if routing.routes(model) else provider_of(model)
    return found.context_window(model) if found is not None and found.context_window else None


def check_model_string(model: str, *, field: str = "model") -> None:
    """Fail when `model` names no model this process knows how to reach (a typo in the provider or
    the name), without looking for its key, install or server: so a model setting no grader or
    proposer will use is still checked."""
    if routing.routes(model):  # a name of the models file (`optimizer.models.routing`)
        return
    if not model or "/" not in model:
        raise ModelConfigError(f"{model!r} is not a model string", field=field,
                               fix="use provider/name, e.g. mock/sim, openai/gpt-4o-mini")
    found = provider_of(model)
    if found is not None:
        if found.check is not None:
            found.check(model, field)
        return
    try:
        litellm_module().get_llm_provider(model)
    except Exception:
        raise ModelConfigError(f"litellm does not know the provider of {model!r}, and no provider is registered "
                               f"for {model.split('/', 1)[0]!r}", field=field,
                               fix="use a litellm model string such as openai/gpt-4o-mini or ollama/llama3, or "
                                   "install the package that provides it (`pip install -e .` for this project's "
                                   "own, e.g. local/)") from None


def validate_model(model: str, *, field: str = "model") -> None:
    """Fail with a clear message when `model` cannot be called from here."""
    check_model_string(model, field=field)
    if routing.routes(model):
        routing.validate(model, field=field)
        return
    found = provider_of(model)
    if found is not None:
        if found.validate is not None:
            found.validate(model, field)
        return
    litellm = litellm_module()
    missing = litellm.validate_environment(model).get("missing_keys") or []
    if missing:
        raise ModelConfigError(f"{model!r} needs {', '.join(missing)} in the environment", field=field,
                               fix=f"export {missing[0]}=... or choose another model")
