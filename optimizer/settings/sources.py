"""Where settings come from, read as raw values: `[tool.optimizer]` in pyproject.toml (or
optimizer.toml) and `OPTIMIZER_*` environment variables. `optimizer.settings.config` validates them into
`Settings`; this module builds no model, so a command that needs only where the store is
(`optimizer history`) and the check every command makes on the environment do not pay for
importing and building the settings models."""

from __future__ import annotations

import ast
import difflib
import functools
import os
import tomllib
from pathlib import Path
from typing import Any

from optimizer.errors import ConfigError
from optimizer.files import parse_json, read_input
from optimizer.settings.parts import DEFAULT_STATE_DIR

ENVIRONMENT = "environment (OPTIMIZER_*)"
ENV_PREFIX = "OPTIMIZER_"


@functools.cache
def _source(module: str) -> ast.Module:
    """`optimizer/settings/<module>.py` parsed: a parse of one file instead of importing pydantic
    and building the model."""
    return ast.parse(Path(__file__).with_name(f"{module}.py").read_text(encoding="utf-8"))


def _fields(module: str, model: str) -> dict[str, ast.expr | None]:
    """The fields of class `model` in `module`, each with its default's expression (None without one)."""
    found = next(node for node in _source(module).body if isinstance(node, ast.ClassDef) and node.name == model)
    return {node.target.id: node.value for node in found.body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}


def _constant(name: str) -> ast.expr | None:
    """The value of a module-level constant of the settings model's module or of the parts'."""
    return next((node.value for module in ("config", "parts") for node in _source(module).body
                 if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets)), None)


def setting_names() -> frozenset[str]:
    """The names of `Settings`' fields (written there once): what the environment may set."""
    return frozenset(_fields("config", "Settings"))


def setting_default(name: str) -> Any:
    """The default of setting `name` as written on `Settings`, or on `GatePolicy` for the gate's
    (`GATE.<field>`), for the commands' help without building the model. A default that is not a
    literal (a factory) is None."""
    value = _fields("config", "Settings")[name]
    if isinstance(value, ast.Call):  # Field(default=..., ...)
        value = next((keyword.value for keyword in value.keywords if keyword.arg == "default"), None)
    if isinstance(value, ast.Attribute) and getattr(value.value, "id", "") == "GATE":
        value = _fields("parts", "GatePolicy")[value.attr]
    if isinstance(value, ast.Name):
        value = _constant(value.id)
    try:
        return ast.literal_eval(value) if value is not None else None
    except ValueError:
        return None


NOT_SETTINGS = {
    "OPTIMIZER_ROOT": "the project folder (`find_project_root`)",
    "OPTIMIZER_MODEL_DIR": "where the embedded model is kept (`optimizer.engines.llamacpp.install`)",
    "OPTIMIZER_PLAIN": "plain progress lines instead of live bars (`optimizer.cli._common`)",
    "OPTIMIZER_AIDER_VENV": "the aider install `make aider` made, for its end-to-end test "
                            "(`tests/optimizer/proposal/test_aider_proposer.py`)",
    "OPTIMIZER_VIEWER_URL": "`review` and `gate`: the viewer or export whose pages the review links to",
    "OPTIMIZER_REVIEW_FORMAT": "`review --format`",
    "OPTIMIZER_VIEW_HOST": "`view --host`",
    "OPTIMIZER_VIEW_PORT": "`view --port`",
}
"""The `OPTIMIZER_*` environment variables the project reads that are not settings (among them the
command-line options that read a variable, `envvar=`). Every other `OPTIMIZER_<NAME>` must name a
setting: an unknown one is a typo, refused rather than ignored."""

REMOVED_SETTINGS = {
    "processes": "trials run on threads in one process (forked worker processes made no run measurably "
                 "faster, docs/benchmarks.md#harness-overhead); delete the setting",
}
"""Settings that existed once, with what to do instead: setting one is an error that says so."""


def removed(name: str, source: str, field: str) -> ConfigError:
    return ConfigError(f"the setting {name!r} was removed", path=source, field=field, fix=REMOVED_SETTINGS[name])


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder holding optimizer.toml or a pyproject.toml with [tool.optimizer]."""
    if os.environ.get("OPTIMIZER_ROOT"):
        root = Path(os.environ["OPTIMIZER_ROOT"]).resolve()
        if not root.is_dir():
            raise ConfigError(f"{root} is not a folder", path=ENVIRONMENT, field="OPTIMIZER_ROOT",
                              fix="point it at the project folder, or unset it to use the current folder")
        return root
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "optimizer.toml").is_file():
            return folder
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file() and "[tool.optimizer" in pyproject.read_text(encoding="utf-8", errors="replace"):
            return folder
    return here


def file_settings(root: Path) -> tuple[dict[str, Any], Path | None]:
    """The settings file's values and its path: optimizer.toml, else pyproject.toml's
    [tool.optimizer]; ({}, None) when neither sets anything."""
    for name, section in (("optimizer.toml", None), ("pyproject.toml", ("tool", "optimizer"))):
        path = root / name
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(read_input(path, ConfigError))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"not valid TOML: {exc}", path=path, fix="fix the TOML syntax") from None
        for key in section or ():
            data = data.get(key, {})
            if not isinstance(data, dict):
                raise ConfigError(f"[{'.'.join(section)}] must be a table of settings, not {type(data).__name__}",
                                  path=path, field=".".join(section),
                                  fix="write it as a [tool.optimizer] section with key = value lines")
        if data:
            return dict(data), path
    return {}, None


def check_environment() -> None:
    """Refuse an `OPTIMIZER_*` variable that names neither a setting nor one of `NOT_SETTINGS`
    (set to nothing, it is unset, as a setting is). Run by every command, including those that
    read no settings (`OPTIMIZER_MODEL_DIRR` would otherwise install the model elsewhere)."""
    known = sorted({ENV_PREFIX + name.upper() for name in setting_names()} | set(NOT_SETTINGS))
    for variable in sorted(os.environ):
        if variable.startswith(ENV_PREFIX) and os.environ[variable] and variable not in known:
            if variable.removeprefix(ENV_PREFIX).lower() in REMOVED_SETTINGS:
                raise removed(variable.removeprefix(ENV_PREFIX).lower(), ENVIRONMENT, variable)
            names = {name.removeprefix(ENV_PREFIX): name for name in known}  # the shared prefix is no likeness
            close = [names[name] for name in difflib.get_close_matches(variable.removeprefix(ENV_PREFIX), names, n=3)]
            hint = f"did you mean {' or '.join(close)}? Else unset it" if close else "unset it"
            raise ConfigError("unknown variable: no setting has this name", path=ENVIRONMENT, field=variable,
                              fix=f"{hint}; known: {', '.join(known)}")


def env_settings(names: frozenset[str] | None = None) -> dict[str, Any]:
    """The settings the environment sets, of `names` (default: every setting); a variable set to
    nothing is unset."""
    check_environment()
    values: dict[str, Any] = {}
    for name in sorted(setting_names() if names is None else names):
        raw = os.environ.get(f"{ENV_PREFIX}{name.upper()}")
        if raw is None or raw == "":
            continue
        if name in ("suites", "proposer_env"):
            values[name] = [part.strip() for part in raw.split(",") if part.strip()]
        elif name == "model_prices":
            values[name] = parse_json(raw, ENVIRONMENT, ConfigError, field="OPTIMIZER_MODEL_PRICES",
                                      fix='e.g. OPTIMIZER_MODEL_PRICES=\'{"openai/gpt-4.1-mini": [0.4, 1.6]}\'')
        else:
            values[name] = raw
    return values


def store_url_as_given(root: Path) -> str | None:
    """The store's URL as the settings file and the environment give `database_url` and
    `state_dir`, the other settings neither read nor checked; None when either is not a plain
    string (the caller then loads the whole `Settings`, whose validation reports it)."""
    from optimizer.store.address import url_of

    values = {**file_settings(root)[0], **env_settings(frozenset({"database_url", "state_dir"}))}
    url, state_dir = values.get("database_url"), values.get("state_dir", DEFAULT_STATE_DIR)
    if not isinstance(url, (str, type(None))) or not isinstance(state_dir, str):
        return None
    return url_of(url, state_dir, root)[0]
