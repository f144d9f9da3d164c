"""Loading the settings: `[tool.optimizer]` in pyproject.toml (or optimizer.toml), then `OPTIMIZER_*`
environment variables, then command-line flags, each overriding the one before; every value
validated against `Settings` and the errors naming their source and field (`load_settings`);
then the checks that need the machine (models, the proposer's environment, the workspace).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from optimizer.errors import ConfigError
from optimizer.settings.config import DEFAULT_MODEL, DEFAULT_MODELS_FILE, MAX_PRICE, Settings
from optimizer.settings.sources import ENVIRONMENT, REMOVED_SETTINGS, env_settings, file_settings, removed

MIN_SEARCH_ROLLOUTS = 12
"""The least screening budget that can hold gepa's first screen of the base prompt and one
proposal's minibatch (`optimizer.proposal.search`)."""
def check_search_budget(search_rollouts: int) -> None:
    """Refuse a screening budget (`search_rollouts`) that is on but too small to screen one proposal."""
    if 0 < search_rollouts < MIN_SEARCH_ROLLOUTS:
        raise ConfigError(f"search_rollouts = {search_rollouts} cannot screen a single proposal",
                          field="search_rollouts",
                          fix=f"set 0 (no search) or at least {MIN_SEARCH_ROLLOUTS}; see docs/search.md")


MOCK_PREFIX = "mock/"
MOCK_JUDGE = "mock/sim"
"""The judge of a run whose agent model is a mock and whose judge model nobody set: the default
judge, the embedded model, would start (or join) a real server and take minutes per judged trial."""
def load_settings(root: Path, overrides: dict[str, Any] | None = None) -> Settings:
    """Merge file, environment and flag settings; errors name the source and the field."""
    file_values, file_path = file_settings(root)
    layers = [(file_values, str(file_path) if file_path else "settings file"),
              (env_settings(), ENVIRONMENT),
              ({k: v for k, v in (overrides or {}).items() if v is not None}, "command line")]
    merged: dict[str, Any] = {}
    for values, source in layers:
        for key, value in values.items():
            if key in REMOVED_SETTINGS:
                raise removed(key, source, key)
            if key not in Settings.model_fields:
                nested = key == "tool" and source.endswith("optimizer.toml")
                raise ConfigError(f"unknown setting {key!r}", path=source, field=key,
                                  fix="optimizer.toml holds the settings at its top level: drop the "
                                      "[tool.optimizer] line" if nested else
                                      f"known settings: {', '.join(Settings.model_fields)}")
        candidate = {**merged, **values}
        try:
            Settings.model_validate(candidate)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"])
            if source == "command line":
                field = "--" + field.split(".")[0].replace("_", "-")
            elif source.startswith("environment"):
                field = f"OPTIMIZER_{field.split('.')[0].upper()}"
            raise ConfigError(error["msg"], path=source, field=field, fix=_fix(error)) from None
        merged = candidate
    if "judge_model" not in merged and str(merged.get("agent_model", DEFAULT_MODEL)).startswith(MOCK_PREFIX):
        merged["judge_model"] = MOCK_JUDGE  # a mock run's judges are mocks unless a judge model is asked for
    return put_in_use(Settings.model_validate(merged), root)


def _fix(error: dict[str, Any]) -> str:
    """The fix of a setting's validation `error`: its whole range when a bound refused it."""
    name = str(error["loc"][0])
    if name == "model_prices":
        return (f"give each model [input, output] prices in USD per million tokens, each from 0 to "
                f"{MAX_PRICE:,.0f}")
    if error["type"] == "too_short":
        return "name at least one (or unset it for the default)"
    allowed = _allowed(name)
    if error["type"] in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and allowed:
        return f"use a value {allowed} (docs/settings.md#bounds says why)"
    return "correct the value (see `optimizer --help`)"


def _allowed(name: str) -> str | None:
    """The range of setting `name` in words ("at least 1 and at most 1,000"); None when it has no
    upper bound."""
    words = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}
    parts = [(key, f"{words[key]} {_number(value)}") for rule in Settings.model_fields[name].metadata
             for key in words if (value := getattr(rule, key, None)) is not None]
    return " and ".join(text for _, text in parts) if any(key in ("le", "lt") for key, _ in parts) else None


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def put_in_use(settings: Settings, root: Path) -> Settings:
    """Make the checks validation alone cannot, and apply what is shared by the whole process:
    for settings `load_settings` read, and for a resumed night's stored ones."""
    _check_workspace_dir(settings)
    _check_state_dir(settings, root)
    _check_proposer_env(settings)
    check_search_budget(settings.search_rollouts)
    from optimizer.models import configure_providers  # e.g. the embedded model's slots, shared by the whole process

    configure_providers(settings.provider)
    _use_models_file(settings, root)
    _check_model_strings(settings)
    return settings


def _check_model_strings(settings: Settings) -> None:
    """Every model setting names a model some provider knows, whether or not this command uses it
    (`--judge-model nope/x` on a suite without judges is a typo all the same). Plugins load first
    when a model's provider is not known yet, since a plugin may register one; a command on the
    built-in models (`optimizer history`) does not import them."""
    from optimizer.models import check_model_string, provider_of, routing

    models = {field: getattr(settings, field) for field in ("agent_model", "judge_model", "patcher_model")}
    if any(provider_of(model) is None and not routing.routes(model) for model in models.values()):
        from optimizer.registry import load_plugins

        load_plugins()
    for field, model in models.items():
        check_model_string(model, field=field)


def _use_models_file(settings: Settings, root: Path) -> None:
    """Check the models file now (a bad one is refused before anything runs) and route its names."""
    from optimizer.models import routing

    path = Path(settings.models_file)
    routing.use_models_file(path if path.is_absolute() else root / path,
                            required=settings.models_file != DEFAULT_MODELS_FILE)


def _check_proposer_env(settings: Settings) -> None:
    """`proposer_env` names variables, none of them one the proposer is never given."""
    if not settings.proposer_env:
        return
    from optimizer.proposal.box import ENV_NAME, NEVER_PASSED, never_passed

    for name in settings.proposer_env:
        if not ENV_NAME.match(name):
            raise ConfigError(f"{name!r} is not an environment variable's name", field="proposer_env",
                              fix="name variables (letters, digits and _), e.g. proposer_env = [\"MY_AGENT_TOKEN\"]")
        if never_passed(name):
            raise ConfigError(f"{name} is never passed to a proposer (the harness's settings, the store's address, "
                              f"the database client's and git's variables: {', '.join(NEVER_PASSED)})",
                              field="proposer_env", fix=f"remove {name}; a proposer has no use for the store "
                                                        "(docs/trust.md)")


def _check_state_dir(settings: Settings, root: Path) -> None:
    """The state folder is a folder of its own: the project folder itself, or one holding it, would
    put the store and proposers' boxes among the project's files, and its ignore-everything
    `.gitignore` would hide the project's new files from git."""
    state = (root / settings.state_dir).resolve()
    if root.resolve().is_relative_to(state):
        raise ConfigError(f"{settings.state_dir!r} is the project folder {root} or holds it", field="state_dir",
                          fix="name a folder of its own, such as .optimizer (the default)")


def _check_workspace_dir(settings: Settings) -> None:
    """Trial workspaces are made in `workspace_dir`: it must be an existing, writable folder."""
    folder = settings.workspace_dir
    if folder and not (os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK)):
        problem = "is not a writable folder" if os.path.isdir(folder) else "does not exist or is not a folder"
        raise ConfigError(f"{folder!r} {problem}", field="workspace_dir",
                          fix="create the folder, or unset workspace_dir to use the default")
