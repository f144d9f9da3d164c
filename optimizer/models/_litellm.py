"""Lazy, offline-safe access to litellm.

Importing litellm takes several seconds, so it is imported only when a model is called. Its cost
map is read from the installed package (never fetched), its own cache and retries are off (the
harness does both), and the registered providers' handlers (`optimizer.models.providers`) are
installed on first use.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from optimizer import ledger
from optimizer.models.providers import free_models, on_change, registered

_lock = threading.Lock()
_litellm: Any = None
_handlers: dict[str, Any] = {}


def litellm_module() -> Any:
    """Return the configured litellm module, importing it on first use."""
    global _litellm
    if _litellm is not None:
        return _litellm
    with _lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm

            litellm.suppress_debug_info = True
            # No litellm logging callback is configured, so there is nothing to redact; left on,
            # litellm deep-copies every request to redact it (some 0.3 ms a call).
            litellm.turn_off_message_logging = False
            litellm.drop_params = True
            litellm.cache = None
            _litellm = litellm
            _install_providers()
    return _litellm


def litellm_loaded() -> bool:
    """Whether litellm is imported already (a call to `litellm_module` costs nothing then)."""
    return _litellm is not None


def provider_changed(prefix: str) -> None:
    """Build a (re)registered provider's handler now if litellm is loaded, else when it is."""
    with _lock:
        _handlers.pop(prefix, None)
        if _litellm is not None:
            _install_providers()


on_change(provider_changed)


def _install_providers() -> None:
    providers = registered()
    for prefix, provider in providers.items():
        if prefix not in _handlers:
            _handlers[prefix] = provider.handler()
    _litellm.custom_provider_map = [
        {"provider": prefix, "custom_handler": handler} for prefix, handler in _handlers.items()
    ]
    setup = getattr(_litellm.utils, "custom_llm_setup", None)
    if setup is not None:
        setup()
    free = {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "mode": "chat",
            "max_tokens": 32768, "max_input_tokens": 32768, "max_output_tokens": 8192,
            "supports_function_calling": True}
    import logging

    quiet = logging.getLogger("LiteLLM")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        _litellm.register_model({
            model: {**free, "litellm_provider": prefix}
            for prefix, models in free_models().items() for model in models
        })
    finally:
        quiet.setLevel(level)


_prices_found: dict[str, tuple[float, float]] = {}
_prices_missing: dict[str, int] = {}
"""Models litellm had no price for, with the size of its cost map then (a provider entering
models later grows the map, and the model is asked for again)."""


def litellm_price(model: str) -> tuple[float, float] | None:
    """litellm's price of `model` per input and output token, by its exact name (how our
    providers enter their models) or through litellm's model info, which also finds a hosted
    model under its provider prefix (`openai/gpt-4o-mini` is mapped as `gpt-4o-mini`); None when
    it has none. Every call is priced before it is made, so answers are kept."""
    if model in _prices_found:
        return _prices_found[model]
    known = -1
    try:
        litellm = litellm_module()
        known = len(litellm.model_cost)
        info = litellm.model_cost.get(model)
        if info is None:
            if _prices_missing.get(model) == known:
                return None
            info = litellm.get_model_info(model)
    except Exception:  # not mapped
        _prices_missing[model] = known
        return None
    price = float(info.get("input_cost_per_token") or 0.0), float(info.get("output_cost_per_token") or 0.0)
    _prices_found[model] = price
    return price


ledger.price_catalog(litellm_price)
