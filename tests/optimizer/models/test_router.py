"""A model name served by several deployments (`models.yaml`, `optimizer.models.routing`): real
`optimizer eval` runs through litellm's Router over two OpenAI-compatible servers of ours, each
its own process (`tests/openai_stub_server.py`), answering as `mock/oracle` would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from optimizer.ledger import Ledger
from optimizer.models import concurrency_limit, routing
from tests.conftest import PROJECT_ROOT

STUB = PROJECT_ROOT / "tests" / "openai_stub_server.py"


class Stub:
    """One stub server process; `answered` counts the calls it answered (from its log file)."""

    def __init__(self, name: str, folder: Path, *extra: str):
        self.log = folder / f"calls-{name}.txt"
        self.log.touch()
        self.process = subprocess.Popen([sys.executable, str(STUB), "--name", name, "--log", str(self.log), *extra],
                                        stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT)
        self.port: int | None = None

    def wait_ready(self) -> "Stub":
        line = self.process.stdout.readline()  # its port once it listens; '' when it exited instead
        assert line.startswith("PORT "), f"stub did not start: {line!r}"
        self.port = int(line.split()[1])
        return self

    @property
    def answered(self) -> int:
        return len(self.log.read_text().splitlines())

    def deployment(self, **params) -> dict:
        return {"model_name": "pool", "litellm_params": {
            "model": "openai/stub", "api_base": f"http://127.0.0.1:{self.port}/v1", "api_key": "none", **params}}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self.process.stdout.close()


@pytest.fixture
def stubs(tmp_path):
    """Start stub servers (`start(name, *flags)` for each, started together); all stopped after."""
    started: list[Stub] = []

    def start(*specs: tuple[str, ...]) -> list[Stub]:
        new = [Stub(name, tmp_path, *flags) for name, *flags in specs]
        started.extend(new)
        return [stub.wait_ready() for stub in new]

    yield start
    for stub in started:
        stub.stop()


@pytest.fixture(autouse=True)
def no_models_file_after():
    """The models file in use is process-wide: the next test must not route through this one's."""
    yield
    routing.use_models_file(Path("/nonexistent/models.yaml"), required=False)


def write_models(path: Path, data: dict | str, monkeypatch) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setenv("OPTIMIZER_MODELS_FILE", str(path))
    return path


def run_eval(cli, tmp_path) -> dict:
    out = tmp_path / "summary.json"
    code, stdout, err = cli("eval", "--suite", "card_agent", "--agent-model", "pool", "--trials", "1",
                            "--json", str(out))
    assert code == 0, stdout + err
    return json.loads(out.read_text())


def test_calls_of_a_routed_name_spread_over_both_servers(cli, stubs, tmp_path, monkeypatch):
    a, b = stubs(("A",), ("B",))
    write_models(tmp_path / "models.yaml", {"model_list": [a.deployment(max_parallel_requests=2),
                                                           b.deployment(max_parallel_requests=2)]}, monkeypatch)
    summary = run_eval(cli, tmp_path)
    totals = summary["totals"]
    assert totals["trials"] == 25 and totals["errored"] == 0
    assert summary["suites"][0]["mean_score"] == 1.0, "the servers replay every task's reference solution"
    assert a.answered > 0 and b.answered > 0, (a.answered, b.answered)
    assert a.answered + b.answered == totals["model_calls"]


def test_a_server_killed_mid_run_leaves_its_calls_to_the_other_and_no_trial_errored(cli, stubs, tmp_path,
                                                                                    monkeypatch):
    """B is killed (SIGKILL) when its sixth call arrives, before answering it or any other call it
    holds: those calls, and every one routed to B after, must be answered by A."""
    a, b = stubs(("A", "--delay", "0.01"), ("B", "--delay", "0.01", "--die-on", "6"))
    write_models(tmp_path / "models.yaml", {"model_list": [a.deployment(), b.deployment()]}, monkeypatch)
    summary = run_eval(cli, tmp_path)
    assert b.process.wait(timeout=10) == -9, "B should have been killed mid-run"
    totals = summary["totals"]
    assert totals["trials"] == 25 and totals["errored"] == 0
    assert summary["suites"][0]["mean_score"] == 1.0
    assert 0 < b.answered < 6, "B answered some calls, then died with one or more in flight"
    assert a.answered + b.answered == totals["model_calls"], "every call lost with B was answered by A"


def test_routed_concurrency_is_the_sum_of_the_deployments_limits(tmp_path):
    both = {"model_list": [{"model_name": "pool", "litellm_params": {"model": "openai/a", "max_parallel_requests": 3}},
                           {"model_name": "pool", "litellm_params": {"model": "openai/b", "max_parallel_requests": 2}},
                           {"model_name": "open", "litellm_params": {"model": "openai/a", "max_parallel_requests": 3}},
                           {"model_name": "open", "litellm_params": {"model": "openai/b"}}]}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(both))
    routing.use_models_file(tmp_path / "models.yaml", required=True)
    assert concurrency_limit("pool") == 5
    assert concurrency_limit("open") is None, "one deployment without a limit: only the setting limits it"
    assert concurrency_limit("openai/a") is None


def test_a_routed_name_is_priced_as_its_dearest_deployment(tmp_path):
    data = {"model_list": [{"model_name": "pool", "litellm_params": {"model": "openai/cheap"}},
                           {"model_name": "pool", "litellm_params": {"model": "openai/dear"}},
                           {"model_name": "half", "litellm_params": {"model": "openai/cheap"}},
                           {"model_name": "half", "litellm_params": {"model": "openai/unpriced"}},
                           {"model_name": "openai/same", "litellm_params": {"model": "openai/same"}}]}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(data))
    routing.use_models_file(tmp_path / "models.yaml", required=True)
    ledger = Ledger(None, prices={"openai/cheap": (1.0, 2.0), "openai/dear": (3.0, 4.0)})
    assert ledger.price("pool") == (3.0 / 1e6, 4.0 / 1e6)
    assert ledger.has_price("pool")
    assert ledger.price("half") == (1.0 / 1e6, 2.0 / 1e6), "an unpriced deployment costs 0, as any unpriced model"
    assert not ledger.has_price("half"), "a USD budget cannot bind a deployment without a price"
    assert Ledger(None, prices={"half": (5.0, 5.0)}).price("half") == (5.0 / 1e6, 5.0 / 1e6)
    assert ledger.price("openai/same") == (0.0, 0.0) and not ledger.has_price("openai/same"), \
        "a pool named like its deployments' model is priced by that model, not looked up again"


DEPLOYMENT = ("  - model_name: pool\n    litellm_params:\n      model: openai/stub\n"
              "      api_base: http://127.0.0.1:9/v1\n")


@pytest.mark.parametrize("text, expected", [
    ("model_list: [\n", ["not valid YAML", "fix: fix the YAML syntax"]),
    ("- model_name: pool\n", ["must be a mapping with a model_list", "fix: start the file with `model_list:`"]),
    ("model_list:\n  - model_name: pool\n    litellm_params: {api_base: http://x}\n",
     ["field 'model_list[0].litellm_params.model'", "Field required", "Many servers: models.yaml"]),
    (f"model_list:\n{DEPLOYMENT}router_settings:\n  routing_strategy: fastest\n",
     ["field 'router_settings.routing_strategy'", "least-busy"]),
    (f"model_list:\n{DEPLOYMENT}router_settings:\n  num_retry: 3\n",
     ["field 'router_settings.num_retry'", "known router_settings: routing_strategy, num_retries"]),
    ("model_list:\n  - model_name: mock/sim\n    litellm_params: {model: openai/x}\n",
     ["field 'model_list[0].model_name'", "would hide a built-in model"]),
    (f"model_list:\n{DEPLOYMENT}      max_parallel_requests: 0\n",
     ["field 'model_list[0].litellm_params.max_parallel_requests'", "greater than or equal to 1"]),
])
def test_a_bad_models_file_is_refused_naming_the_file_and_field(cli, isolated, tmp_path, monkeypatch, text, expected):
    path = write_models(tmp_path / "models.yaml", text, monkeypatch)
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "pool")
    assert code == 2, (code, out, err)
    for fragment in [str(path), *expected]:
        assert fragment in err, f"{fragment!r} not in: {err}"
    assert not (isolated / "optimizer.db").exists()


def test_a_models_file_named_but_missing_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("OPTIMIZER_MODELS_FILE", str(tmp_path / "nowhere.yaml"))
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "mock/sim")
    assert code == 2 and "nowhere.yaml" in err and "field 'models_file'" in err and "does not exist" in err, err


def test_a_deployment_key_from_an_unset_variable_is_refused(cli, tmp_path, monkeypatch):
    monkeypatch.delenv("STUB_POOL_KEY", raising=False)
    write_models(tmp_path / "models.yaml", f"model_list:\n{DEPLOYMENT}      api_key: os.environ/STUB_POOL_KEY\n",
                 monkeypatch)
    code, out, err = cli("eval", "--suite", "card_agent", "--agent-model", "pool")
    assert code == 2 and "STUB_POOL_KEY" in err and "field 'agent_model'" in err, err
    monkeypatch.setenv("STUB_POOL_KEY", "secret")
    routing.validate("pool", field="agent_model")
