"""Model names served by several deployments, through one litellm `Router` per process.

The models file (`models_file`, default `models.yaml` in the project folder) is litellm's own
`model_list`: each entry maps a `model_name` to one deployment (`litellm_params`: `model`,
`api_base`, `api_key`, `timeout`, `max_parallel_requests`, `rpm`, `tpm`, `weight`, ...), and
entries sharing a name are one pool. An optional `router_settings` mapping is passed to
`litellm.Router`. A model string that is a `model_name` of the file is sent through the Router;
any other goes to `litellm.completion` as before. See docs/models.md.

The file is read and checked when the settings are loaded (`use_models_file`), without litellm;
the Router is built on the first call of a routed name, since importing litellm is slow.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from optimizer import ledger
from optimizer.errors import ModelConfigError
from optimizer.files import read_input

ENV_KEY = "os.environ/"
"""litellm's spelling of a value read from the environment: `api_key: os.environ/OPENAI_API_KEY`."""
RESERVED_PREFIXES = ("mock/", "local/")
FIX = "see docs/models.md, 'Many servers: models.yaml'"


class LitellmParams(BaseModel):
    """One deployment: what `litellm.completion` gets for it. Keys not named here are passed on."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key: str | None = None
    timeout: float | None = Field(default=None, gt=0)
    max_parallel_requests: int | None = Field(default=None, ge=1)
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    weight: float | None = Field(default=None, gt=0)


class Deployment(BaseModel):
    model_config = ConfigDict(extra="allow")  # model_info and other litellm keys

    model_name: str = Field(min_length=1)
    litellm_params: LitellmParams

    @field_validator("model_name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name.startswith(RESERVED_PREFIXES):
            raise ValueError(f"{name!r} would hide a built-in model; names starting with "
                             f"{' or '.join(RESERVED_PREFIXES)} are the harness's own")
        return name


class RouterSettings(BaseModel):
    """The `litellm.Router` arguments the file may set."""

    model_config = ConfigDict(extra="forbid")

    routing_strategy: Literal["least-busy", "simple-shuffle", "usage-based-routing", "usage-based-routing-v2",
                              "latency-based-routing", "cost-based-routing"] = "least-busy"
    """least-busy: each call goes to the deployment with the fewest calls in flight from this
    process (litellm reserves the pick under a lock, so concurrent trial threads spread evenly,
    and a slower server ends up with fewer calls)."""
    num_retries: int = Field(default=2, ge=0, le=20)
    """Tries of another pick after a failed call (a server gone, 5xx, 429, a timeout), before the
    call fails to the harness's own retries."""
    timeout: float | None = Field(default=None, gt=0)
    allowed_fails: int = Field(default=0, ge=0)
    """Failures a deployment may have (per minute) before it sits out `cooldown_time`. 0, not
    litellm's 3: a server that is gone holds no calls in flight, so least-busy would pick it
    first again and again until it cools down."""
    cooldown_time: float = Field(default=10.0, ge=0)
    """Seconds a failing deployment gets no calls; then it is tried again."""
    retry_after: int | None = Field(default=None, ge=0)
    disable_cooldowns: bool | None = None
    max_fallbacks: int | None = Field(default=None, ge=0)
    fallbacks: list[dict[str, list[str]]] | None = None
    retry_policy: dict[str, int] | None = None
    allowed_fails_policy: dict[str, int] | None = None


class ModelsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_list: list[Deployment] = Field(min_length=1)
    router_settings: RouterSettings = Field(default_factory=RouterSettings)

    def deployments(self, name: str) -> list[LitellmParams]:
        return [entry.litellm_params for entry in self.model_list if entry.model_name == name]


_lock = threading.Lock()
_path: Path | None = None
_file: ModelsFile | None = None
_router: Any = None


def use_models_file(path: Path, *, required: bool) -> None:
    """Read and check the models file at `path` and route its names from now on (the Router of a
    previous file is dropped). A missing file routes nothing, unless `required`."""
    global _path, _file, _router
    loaded = load(path) if required or path.is_file() else None
    with _lock:
        if loaded != _file:
            _router = None
        _path, _file = (path if loaded else None), loaded


def load(path: Path) -> ModelsFile:
    """The models file at `path`, checked; errors name the file, the field and the fix."""
    import yaml  # only when there is a models file: most commands have none

    text = read_input(path, ModelConfigError, field="models_file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelConfigError(f"not valid YAML: {str(exc).splitlines()[0]}", path=path,
                               fix="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"must be a mapping with a model_list, not {type(data).__name__}", path=path,
                               fix=f"start the file with `model_list:`; {FIX}")
    try:
        return ModelsFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]).lstrip(".")
        hint = (f"known router_settings: {', '.join(RouterSettings.model_fields)}"
                if error["type"] == "extra_forbidden" and field.startswith("router_settings") else FIX)
        raise ModelConfigError(error["msg"], path=path, field=field or None, fix=f"correct it; {hint}") from None


def routes(model: str) -> bool:
    """Whether `model` is a `model_name` of the models file in use."""
    current = _file
    return current is not None and bool(current.deployments(model))


def deployment_models(model: str) -> list[str]:
    """The litellm model strings behind a routed name; [] for any other model string."""
    current = _file
    return [params.model for params in current.deployments(model)] if current is not None else []


def concurrency(model: str) -> int | None:
    """The sum of the deployments' `max_parallel_requests` when every one sets it, else None."""
    limits = [params.max_parallel_requests for params in _file.deployments(model)] if _file is not None else []
    return sum(limits) if limits and all(limits) else None


def validate(model: str, *, field: str) -> None:
    """Refuse a routed name some deployment of which cannot be called: a registered provider's
    model its provider refuses (the embedded model when it is not installed here), a key it
    reads from an unset environment variable, or (with neither `api_key` nor `api_base`) a
    provider key litellm finds missing."""
    from optimizer.models._litellm import litellm_module
    from optimizer.models.providers import provider_of

    for index, params in enumerate(_file.deployments(model) if _file is not None else []):
        where = f"{_path}: deployment {index + 1} of {model!r} ({params.model})"
        provider = provider_of(params.model)
        if provider is not None:  # else the embedded model would fail only as a call starts its server
            try:
                if provider.validate is not None:
                    provider.validate(params.model, field)
            except ModelConfigError as exc:
                raise ModelConfigError(f"{where}: {exc.message}", field=field, fix=exc.fix) from None
            continue
        key = params.api_key or ""
        if key.startswith(ENV_KEY) and not os.environ.get(key.removeprefix(ENV_KEY)):
            raise ModelConfigError(f"{where} reads its api_key from {key.removeprefix(ENV_KEY)}, which is not set",
                                   field=field, fix=f"export {key.removeprefix(ENV_KEY)}=... or remove the deployment")
        if params.api_key or params.api_base:
            continue
        missing = litellm_module().validate_environment(params.model).get("missing_keys") or []
        if missing:
            raise ModelConfigError(f"{where} needs {', '.join(missing)} in the environment", field=field,
                                   fix=f"export {missing[0]}=..., give the deployment an api_key, or remove it")


def completion(**kwargs: Any) -> Any:
    """`Router.completion` for a routed name, with the arguments of `litellm.completion`. A call
    with a deadline (`timeout`, the trial's time left) waits no longer than `router_settings`'
    timeout either; without one, the deployment's or the Router's timeout applies."""
    router, cap = _router_and_cap()
    timeout = kwargs.pop("timeout", None)
    if timeout is not None:
        kwargs["timeout"] = min(timeout, cap) if cap else timeout
    return router.completion(**kwargs)


def _router_and_cap() -> tuple[Any, float | None]:
    global _router
    with _lock:
        current = _file
        if current is None:
            raise ModelConfigError("no models file is in use", field="models_file",
                                   fix="load the settings before calling a routed model")
        if _router is None:
            from optimizer.models._litellm import litellm_module
            from optimizer.models.providers import provider_of

            for entry in current.model_list:  # a provider declared by an entry point registers before litellm is asked
                provider_of(entry.litellm_params.model)
            model_list = [entry.model_dump(exclude_none=True) for entry in current.model_list]
            _router = litellm_module().Router(model_list=model_list,
                                              **current.router_settings.model_dump(exclude_none=True))
        return _router, current.router_settings.timeout


ledger.deployment_catalog(deployment_models)
