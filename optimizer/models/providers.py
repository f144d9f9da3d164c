"""Model providers: who answers the `prefix/<name>` model strings that litellm itself does not.

A provider is registered under its prefix with `register_provider` (public as
`optimizer.register_provider`), by the module that defines it: the built-in mocks
(`optimizer.models.mock`), a plugin's module, or a module named in the `optimizer.providers`
entry-point group under the prefix it serves. Such a module is imported the first time a model
of that prefix is resolved (`provider_of`), so a command that names no model of it never pays for
it. The embedded model (`local/...`, `optimizer.engines.llamacpp`) comes this way: the model layer
names no engine, and an outside package adds a provider exactly as the project adds its own.

Calls go through litellm either way: the provider's `handler` is the litellm `CustomLLM` built
once litellm is imported, so the client's cache, retries, deadlines and usage accounting are the
same for every model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Callable, Iterable

from optimizer.errors import ModelConfigError

ENTRY_POINT_GROUP = "optimizer.providers"
"""Entry points named after the prefix they serve, each a module that registers that provider."""


@dataclass(frozen=True)
class Provider:
    """What the harness needs from a provider besides its answers; every hook is optional."""

    handler: Callable[[], Any]
    """Builds the `litellm.CustomLLM` that answers the calls; called once, after litellm is imported."""
    models: tuple[str, ...] = ()
    """Model strings priced at zero (also spares litellm a slow price lookup per call)."""
    embedded: bool = False
    """The model runs on this machine (free, small, slow): a nightly job does not budget it, the
    loop asks it for one rule rather than edits, and the gate names its targets."""
    lists_every_tool: bool = False
    """Under an OpenAI `allowed_tools` choice, send every tool as declared and the choice in the
    call's metadata (`ALLOWED_TOOLS_KEY`), not the allowed tools alone: a server that reuses the
    cached prompt prefix keeps it."""
    check: Callable[[str, str], None] | None = None
    """`(model, field)`: raise `ModelConfigError` when the name is not one this provider serves
    (a typo). Runs whenever settings are loaded, so it must not start or install anything."""
    validate: Callable[[str, str], None] | None = None
    """`(model, field)`: raise `ModelConfigError` when the model cannot be called here (not
    installed, a server that does not start); runs before a command makes its first call."""
    concurrency: Callable[[str], int | None] | None = None
    """How many calls of the model can be served at once, when that is a property of the model."""
    context_window: Callable[[str], int | None] | None = None
    """The model's context length in tokens, when the provider sets it."""
    answer_variant: Callable[[str], str | None] | None = None
    """What decides the answers besides the request (a server's build); part of the cache key."""
    configure: Callable[[Any], None] | None = None
    """Called with the providers' part of the settings in use (`optimizer.ProviderSettings`: the
    models, `concurrency`, `local_slots`), now and whenever they change; never the whole settings."""


_lock = threading.Lock()
_loading = threading.Lock()
"""Held while an entry point is loaded (its module registers under `_lock`), so two threads
resolving one prefix import it once."""
_providers: dict[str, Provider] = {}
_free: dict[str, list[str]] = {}
_entry_points: dict[str, EntryPoint] | None = None
_settings: Any = None


def register_provider(prefix: str, provider: Provider | Callable[[], Any], models: Iterable[str] = ()) -> None:
    """Serve the model strings `prefix/<name>` with `provider`, replacing any provider of `prefix`.

    Args:
        prefix: the part of the model string before the first `/` (no `/` itself).
        provider: a `Provider`, or just its `handler`: a callable returning a `litellm.CustomLLM`.
        models: with a bare handler, the model strings to price at zero (`Provider.models`).
    """
    if not prefix or "/" in prefix:
        raise ModelConfigError(f"{prefix!r} is not a provider prefix", field="prefix",
                               fix="use the part of the model string before its first '/', e.g. 'myprefix'")
    if not isinstance(provider, Provider):
        provider = Provider(handler=provider, models=tuple(models))
    with _lock:
        _providers[prefix] = provider
        _free[prefix] = list(provider.models)
        settings = _settings
    if settings is not None and provider.configure is not None:
        provider.configure(settings)
    _changed(prefix)


_listeners: list[Callable[[str], None]] = []
"""Told the prefix of every provider registered or repriced: the litellm layer, once it is
imported, rebuilds that provider's handler (this module never imports it)."""


def on_change(listener: Callable[[str], None]) -> None:
    _listeners.append(listener)


def _changed(prefix: str) -> None:
    for listener in list(_listeners):
        listener(prefix)


def provider_of(model: str) -> Provider | None:
    """The provider registered for `model`'s prefix, loading its entry point on first use; None
    for a model string litellm answers itself (`openai/...`) or one without a prefix."""
    prefix = model.split("/", 1)[0] if "/" in model else ""
    if not prefix:
        return None
    found = _providers.get(prefix)
    if found is not None:
        return found
    point = _provider_entry_points().get(prefix)
    if point is None:
        return None
    with _loading:
        if prefix not in _providers:
            _load(point)
    return _providers[prefix]


def _load(point: EntryPoint) -> None:
    try:
        point.load()
    except Exception as exc:
        raise ModelConfigError(f"the provider of {point.name}/... ({point.value}) failed to load: {exc}",
                               field=f"entry point {ENTRY_POINT_GROUP}:{point.name}",
                               fix="reinstall the package that declares it (`pip install -e .` for this project)"
                               ) from exc
    if point.name not in _providers:
        raise ModelConfigError(f"{point.value} registered no provider for {point.name}/...",
                               field=f"entry point {ENTRY_POINT_GROUP}:{point.name}",
                               fix=f"call optimizer.register_provider({point.name!r}, ...) when the module is imported")


def _provider_entry_points() -> dict[str, EntryPoint]:
    global _entry_points
    if _entry_points is None:
        _entry_points = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    return _entry_points


def registered_prefixes() -> set[str]:
    """The prefixes registered so far (an entry point not yet loaded is not among them)."""
    return set(_providers)


def registered() -> dict[str, Provider]:
    with _lock:
        return dict(_providers)


def free_models() -> dict[str, list[str]]:
    """Per prefix, the model strings priced at zero."""
    with _lock:
        return {prefix: list(models) for prefix, models in _free.items()}


def price_as_free(prefix: str, model: str) -> None:
    """Price one more model string of a registered provider at zero."""
    with _lock:
        if model in _free[prefix]:
            return
        _free[prefix].append(model)
    _changed(prefix)


def configure_providers(settings: Any) -> None:
    """Hand the providers' part of the settings in use (`ProviderSettings`) to every provider, and
    to those registered later."""
    global _settings
    with _lock:
        _settings = settings
        hooks = [provider.configure for provider in _providers.values() if provider.configure is not None]
    for configure in hooks:
        configure(settings)
