"""The model layer: every model call goes through litellm (only `suites validate` answers the
`mock/*` models in process; see `optimizer.models.mock`).

Built-in providers: `mock/oracle` and `mock/sim` (see `optimizer.models.mock`). Any other
litellm model string works (`openai/...`, `anthropic/...`, `ollama/...`), and so does a
`model_name` of the models file, served by several deployments (see `optimizer.models.routing`).
"""

from __future__ import annotations

from optimizer.errors import ModelConfigError
from optimizer.models import local
from optimizer.models import mock
from optimizer.models import routing
from optimizer.models.mock import answer_variant
from optimizer.models._context import TrialContext, register_trial, unregister_trial
from optimizer.models._litellm import litellm_module, price_as_free, register_provider, registered_prefixes
from optimizer.models.client import (Completion, MalformedResponse, ModelClient, ResponseCache, RetryPolicy,
                                     ToolCallRequest)

__all__ = ["Completion", "MalformedResponse", "ModelClient", "ResponseCache", "RetryPolicy", "ToolCallRequest",
           "TrialContext", "answer_variant", "answered_in_process", "check_model_string", "concurrency_limit", "context_window", "is_embedded", "litellm_module", "register_provider", "register_trial", "unregister_trial", "validate_model"]


def is_embedded(model: str) -> bool:
    """An embedded (`local/*`) model, served by llama.cpp's server on this machine."""
    return model.startswith(f"{local.PREFIX}/")


def answered_in_process(model: str) -> bool:
    """A model answered by a provider registered in this process (`mock/*`, a plugin's), other
    than the embedded model and the models file's names."""
    return model.split("/", 1)[0] in registered_prefixes() and not is_embedded(model) and not routing.routes(model)


def concurrency_limit(model: str) -> int | None:
    """How many calls `model` can serve at once when that is a property of the model (the
    embedded model's server decodes `local_slots` sequences at once; a name of the models file,
    the sum of its deployments' `max_parallel_requests`); None when only the caller's setting
    limits it."""
    if is_embedded(model):
        return local.slots()
    return routing.concurrency(model)


def context_window(model: str) -> int | None:
    """The context length in tokens when this process sets it (the embedded model); else None."""
    return local.N_CTX if is_embedded(model) else None


def check_model_string(model: str, *, field: str = "model") -> None:
    """Fail when `model` names no model this process knows how to reach (a typo in the provider or
    the name), without looking for its key, install or server: so a model setting no grader or
    proposer will use is still checked."""
    if routing.routes(model):  # a name of the models file (`optimizer.models.routing`)
        return
    if not model or "/" not in model:
        raise ModelConfigError(f"{model!r} is not a model string", field=field,
                               fix="use provider/name, e.g. mock/sim, openai/gpt-4o-mini")
    prefix, name = model.split("/", 1)
    if prefix == "mock" and mock.parse_mock_model(name) is None:
        raise ModelConfigError(f"unknown mock model {model!r}", field=field,
                               fix=f"use one of: {', '.join('mock/' + n for n in mock.MOCK_NAMES)}")
    if prefix == local.PREFIX and model != local.MODEL:
        raise ModelConfigError(f"unknown local model {model!r}", field=field, fix=f"use {local.MODEL}")
    if prefix in ("mock", local.PREFIX) or prefix in registered_prefixes():
        return
    try:
        litellm_module().get_llm_provider(model)
    except Exception:
        raise ModelConfigError(f"litellm does not know the provider of {model!r}", field=field,
                               fix="use a litellm model string such as openai/gpt-4o-mini or ollama/llama3") from None


def validate_model(model: str, *, field: str = "model") -> None:
    """Fail with a clear message when `model` cannot be called from here."""
    check_model_string(model, field=field)
    if routing.routes(model):
        routing.validate(model, field=field)
        return
    prefix = model.split("/", 1)[0]
    if prefix == "mock":
        price_as_free("mock", model)
        return
    if prefix == local.PREFIX:
        local.validate(model, field=field)
        return
    if prefix in registered_prefixes():
        return
    litellm = litellm_module()
    missing = litellm.validate_environment(model).get("missing_keys") or []
    if missing:
        raise ModelConfigError(f"{model!r} needs {', '.join(missing)} in the environment", field=field,
                               fix=f"export {missing[0]}=... or choose another model")
