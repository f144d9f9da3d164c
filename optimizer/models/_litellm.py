"""Lazy, offline-safe access to litellm.

Importing litellm takes several seconds, so it is imported only when a model is called. Its cost
map is read from the installed package (never fetched), its own cache and retries are off (the
harness does both), and our custom providers are registered on first use.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

_lock = threading.Lock()
_litellm: Any = None
_providers: dict[str, tuple[Callable[[], Any], list[str]]] = {}
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


def register_provider(prefix: str, factory: Callable[[], Any], models: list[str] | None = None) -> None:
    """Register a litellm custom provider serving `prefix/<name>` model strings.

    `factory` builds the `litellm.CustomLLM` handler once litellm is imported. `models` lists
    full model strings to price at zero, which also spares litellm a slow cost lookup per call.
    """
    with _lock:
        _providers[prefix] = (factory, list(models or []))
        _handlers.pop(prefix, None)
        if _litellm is not None:
            _install_providers()


def price_as_free(prefix: str, model: str) -> None:
    """Price one more model string of a registered provider at zero."""
    with _lock:
        factory, models = _providers[prefix]
        if model not in models:
            models.append(model)
            if _litellm is not None:
                _install_providers()


def registered_prefixes() -> set[str]:
    return set(_providers)


def _install_providers() -> None:
    for prefix, (factory, _) in _providers.items():
        if prefix not in _handlers:
            _handlers[prefix] = factory()
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
            for prefix, (_, models) in _providers.items() for model in models
        })
    finally:
        quiet.setLevel(level)
