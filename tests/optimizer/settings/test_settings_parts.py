"""Each layer's part of the settings (`optimizer.settings.parts`): built from the one validated
`Settings`, holding exactly the settings of its fields' names, and the simulator's knobs in a
part of their own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from optimizer.settings.config import GATE, Settings
from optimizer.errors import ConfigError
from optimizer.settings.parts import (LoopSettings, ModelSettings, NightlySettings, ProposalSettings, RunnerSettings,
                                      SimSettings)

UNUSUAL = Settings(agent_model="mock/sim@20ms", judge_model="mock/oracle", patcher_model="mock/patcher",
                   temperature=0.3, seed=11, retry_attempts=7, retry_base_delay=2.5, cache=False, concurrency=3,
                   workspace_dir="/somewhere", sim_noise="independent", mock_patcher_skill=0.4,
                   proposer="command", proposer_command="agent {request}", proposer_timeout=60.0,
                   patcher_temperature=0.2, patch_format="rule", gate="lenient", alpha=0.02, alpha_harm=0.2,
                   max_bucket_drop=0.3, batch_pairs=5, max_target_pairs=30, min_bucket_pairs=3,
                   max_bucket_pairs=20, max_rollouts=99, extra_target_rollouts=7, suites=["a", "b"], trials=2,
                   loop_trials=9, lone_task_factor=3, state_dir="state", target_buckets=2, target_order="headroom",
                   bucket_patience=5, candidates=2, search_rollouts=30, confirm_trials=6, max_changed_lines=12,
                   request_token_budget=5000, night_alpha=0.3, model_prices={"mock/sim": (1.0, 2.0)}, local_slots=5,
                   refuse_unsafe="any", clear_after=4, refuse_beyond_margin=False, margin_min_pairs=12,
                   name_weighting=True, propose_open="any", safety_rollouts=33, proposer_env=["MY_TOKEN"],
                   holdout_rule="harm", watch_rounds=3, watch_nights=4, non_voting_judges="run", ablation_trials=5)
"""Every setting a part carries set away from its default, so a part reading a default is seen."""

SIM_KNOBS = {"sim_noise", "mock_patcher_script", "mock_patcher_skill"}


def _flat(part) -> dict:
    """A part's values by setting name, its nested parts' included."""
    values = {}
    for item in dataclasses.fields(part):
        value = getattr(part, item.name)
        if dataclasses.is_dataclass(value):
            values.update(_flat(value))
        elif item.name in Settings.model_fields:
            values[item.name] = value
    return values


def test_each_part_holds_the_settings_of_its_field_names():
    for part in (UNUSUAL.sim, UNUSUAL.models, UNUSUAL.provider, UNUSUAL.runner, UNUSUAL.proposal, UNUSUAL.loop,
                 UNUSUAL.nightly, UNUSUAL.evaluation, UNUSUAL.parts):
        for name, value in _flat(part).items():
            given = getattr(UNUSUAL, name)
            assert value == (tuple(given) if isinstance(given, list) else given), f"{type(part).__name__}.{name}"


def test_the_loop_part_resolves_its_trials_and_confirmations():
    """`trials` wins over `loop_trials`; unset confirmations are `batch_pairs` with a search,
    else none."""
    assert UNUSUAL.loop.trials == 2 and UNUSUAL.model_copy(update={"trials": None}).loop.trials == 9
    assert UNUSUAL.loop.runner.record["trials"] == 2
    unset = UNUSUAL.model_copy(update={"confirm_trials": None})
    assert unset.loop.confirm_trials == 5
    assert unset.model_copy(update={"search_rollouts": 0}).loop.confirm_trials == 0
    assert UNUSUAL.loop.gate_policy == UNUSUAL.gate_policy and UNUSUAL.loop.proposal == UNUSUAL.proposal


def test_the_gate_policy_holds_every_gate_setting():
    policy = UNUSUAL.gate_policy
    assert policy.mode == "lenient"
    shared = [item.name for item in dataclasses.fields(policy) if item.name in Settings.model_fields]
    assert len(shared) == 17
    for name in shared:
        assert getattr(policy, name) == getattr(UNUSUAL, name), name
    assert policy.budget(2) == 99 + 7


def test_the_runner_records_every_setting_as_given():
    assert UNUSUAL.runner.record == UNUSUAL.model_dump()


def test_a_changed_copy_of_the_settings_is_seen_in_its_parts():
    copy = UNUSUAL.model_copy(update={"seed": 5, "alpha": 0.01})
    assert (copy.runner.models.seed, copy.proposal.seed, copy.gate_policy.alpha) == (5, 5, 0.01)
    assert UNUSUAL.runner.models.seed == 11


def test_a_runner_with_another_seed_changes_the_seed_alone():
    seeded = UNUSUAL.runner.with_seed(42)
    assert seeded.models == dataclasses.replace(UNUSUAL.models, seed=42)
    assert (seeded.concurrency, seeded.sim, seeded.record["seed"]) == (3, UNUSUAL.sim, 42)


def test_the_simulator_knobs_are_a_part_of_their_own():
    """No production part has a field for them: a layer reaches them only through `.sim`, which
    it hands to the mock models."""
    assert {item.name for item in dataclasses.fields(SimSettings)} == SIM_KNOBS
    assert {name for name in Settings.model_fields if name.startswith(("sim_", "mock_"))} == SIM_KNOBS
    for part in (ModelSettings, RunnerSettings, ProposalSettings, LoopSettings, NightlySettings,
                 type(UNUSUAL.gate_policy)):
        assert not SIM_KNOBS & {item.name for item in dataclasses.fields(part)}, part.__name__


def test_the_settings_read_from_their_sources_are_the_settings_models_fields():
    """`optimizer.settings.sources` names the settings without building the model (every command's
    check of the environment, `optimizer history`'s store address), read from the model's source."""
    from optimizer.settings.sources import setting_names

    assert setting_names() == set(Settings.model_fields) and len(Settings.model_fields) > 50


SETTINGS_SOURCES = ("optimizer/settings/config.py", "optimizer/settings/parts.py", "optimizer/models/client.py",
                    "optimizer/trials/judging.py")
"""Where a setting's value is declared: the model, its parts, and the layers' own records of one."""
SETTING_ALIASES = {"mode": "gate", "max_attempts": "retry_attempts", "base_delay_s": "retry_base_delay"}
"""Fields that hold a setting under another name."""


def written_defaults(path: Path) -> list[tuple[str, str]]:
    """(setting, where) for every literal default a class field of `path` gives a setting (`name:
    T = 4`, `name: T = Field(default=4, ...)`): a dataclass's or a model's. A function's parameters
    are the call's, not the setting's (`temperature=0.0` of one model call)."""
    import ast

    def literal(node) -> bool:
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Field":
            node = next((k.value for k in node.keywords if k.arg == "default"), None)
        if isinstance(node, ast.Constant) and node.value is None:
            return False  # "not given": the setting's value is handed in
        return isinstance(node, (ast.Constant, ast.Tuple, ast.List, ast.Dict)) or (
            isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("SimSettings", "field"))

    return [(SETTING_ALIASES.get(item.target.id, item.target.id), f"{path.name}:{item.value.lineno}")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(node, ast.ClassDef)
            for item in node.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            and item.value and SETTING_ALIASES.get(item.target.id, item.target.id) in Settings.model_fields
            and literal(item.value)]


def test_each_setting_and_its_default_is_written_once():
    """A default restated beside the setting drifts from it unseen: every setting's default is a
    literal in one place (the `Settings` model, or `GatePolicy` for the gate's, which the model
    reads), and the parts and the layers' records take theirs from a `Settings`."""
    root = Path(__file__).resolve().parents[3]
    found: dict[str, list[str]] = {}
    for source in SETTINGS_SOURCES:
        for setting, where in written_defaults(root / source):
            found.setdefault(setting, []).append(where)
    twice = {setting: places for setting, places in found.items() if len(places) > 1}
    assert not twice, twice
    assert found["retry_attempts"] == [f"config.py:{_line_of('retry_attempts')}"]
    gate = {setting for setting, places in found.items() if places[0].startswith("parts.py")}
    assert {"alpha", "alpha_harm", "gate", "holdout_rule", "safety_rollouts"} <= gate
    assert all(Settings.model_fields[name].default == getattr(GATE, SETTING_ALIASES.get(name, name), None) or
               name == "gate" and Settings.model_fields[name].default == GATE.mode for name in gate)


def _line_of(setting: str) -> int:
    lines = (Path(__file__).resolve().parents[3] / "optimizer/settings/config.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if line.startswith(f"    {setting}:"))


def test_the_defaults_check_finds_a_restated_default(tmp_path):
    (tmp_path / "restated.py").write_text("from dataclasses import dataclass\n\n\n@dataclass\nclass Part:\n"
                                          "    retry_attempts: int = 4\n    concurrency: int\n"
                                          "    max_attempts: int = Field(default=4)\n    other: int = 2\n")
    assert written_defaults(tmp_path / "restated.py") == [("retry_attempts", "restated.py:6"),
                                                          ("retry_attempts", "restated.py:8")]


POLICY_SETTINGS = {"refuse_unsafe": ("pooled", "pooled"), "clear_after": ("5", 5), "refuse_beyond_margin": ("false", False),
                   "margin_min_pairs": ("10", 10), "name_weighting": ("true", True),
                   "propose_open": ("any", "any"), "safety_rollouts": ("40", 40),
                   "holdout_rule": ("harm", "harm")}
"""Every gate policy choice docs/gate.md offers: (as the environment gives it, as the policy holds it)."""


def test_every_gate_policy_choice_the_docs_offer_is_a_setting_of_pyproject_and_the_environment(tmp_path, monkeypatch):
    from optimizer.settings.loading import load_settings

    gate_doc = (Path(__file__).resolve().parents[3] / "docs" / "gate.md").read_text()
    assert all(f"`{name}`" in gate_doc for name in POLICY_SETTINGS)
    lines = "\n".join(f"{name} = {value!r}" if isinstance(value, str) else f"{name} = {str(value).lower()}"
                       for name, (_, value) in POLICY_SETTINGS.items())
    (tmp_path / "pyproject.toml").write_text(f"[tool.optimizer]\n{lines}\n")
    policy = load_settings(tmp_path).gate_policy
    assert {name: getattr(policy, name) for name in POLICY_SETTINGS} == {n: v for n, (_, v) in POLICY_SETTINGS.items()}
    (tmp_path / "pyproject.toml").write_text("[tool.optimizer]\n")
    for name, (raw, _) in POLICY_SETTINGS.items():
        monkeypatch.setenv(f"OPTIMIZER_{name.upper()}", raw)
    policy = load_settings(tmp_path).gate_policy
    assert {name: getattr(policy, name) for name in POLICY_SETTINGS} == {n: v for n, (_, v) in POLICY_SETTINGS.items()}
    monkeypatch.setenv("OPTIMIZER_REFUSE_UNSAFE", "sometimes")
    with pytest.raises(ConfigError) as refused:
        load_settings(tmp_path)
    assert "OPTIMIZER_REFUSE_UNSAFE" in str(refused.value.field)


def test_the_defaults_read_from_the_source_are_the_models():
    """The commands' help names defaults without building the model (`setting_default`, read from
    the source, the gate's through `GatePolicy`): each one is the model's."""
    from optimizer.settings.sources import setting_default

    literal = {name: field.default for name, field in Settings.model_fields.items() if field.default_factory is None}
    assert {name: setting_default(name) for name in literal} == literal
    assert (setting_default("max_rollouts"), setting_default("gate"), setting_default("loop_trials")) == (250, "strict", 4)
