"""Every pytest marker that `make test` leaves out has a make target of its own that selects it,
and CI runs that target: a check moved behind a marker is moved, not dropped."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import PROJECT_ROOT


def test_every_marker_left_out_of_make_test_has_a_target_that_ci_runs():
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = [line.split(":")[0] for line in config["markers"]]
    left_out = set(re.findall(r"not (\w+)", config["addopts"]))
    assert left_out == set(markers) and "slow" in markers
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    targets = dict(re.findall(r"^([\w-]+):[^\n]*\n(?:\t[^\n]*\n)*?\t[^\n]*pytest[^\n]*-m (\w+)", makefile, re.M))
    ci = (PROJECT_ROOT / ".ci" / "run").read_text()
    for marker in markers:
        target = next((name for name, selected in targets.items() if selected == marker), None)
        assert target, f"no make target runs pytest -m {marker}"
        assert f"run_tests {target}" in ci, f".ci/run does not run make {target}"
    assert "run_tests test ||" in ci
