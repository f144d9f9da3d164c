"""Each layer's part of the settings (`optimizer.settings.parts`): built from the one validated
`Settings`, holding exactly the settings of its fields' names, and the simulator's knobs in a
part of their own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from optimizer.settings.config import Settings
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
                   holdout_rule="harm")
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
                 UNUSUAL.nightly):
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
    check of the environment, `optimizer history`'s store address): the two lists are one."""
    from optimizer.settings.sources import SETTING_NAMES

    assert SETTING_NAMES == set(Settings.model_fields)


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
