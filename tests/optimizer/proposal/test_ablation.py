"""A patch's changed parts each earn their place (`optimizer.proposal.ablation`): a part whose removal
does not lower the targets' screening score is dropped before the gate, and the gate judges
the rest."""

from __future__ import annotations

import json
from pathlib import Path

from optimizer.proposal.ablation import KEEP_BELOW, ablate, apply, parts, removal_p
from tests.helpers import DATA_LINE, FACT_RULE, LINK_HARM, PROMPT, git, script

BASE = "# Agent\n- one\n- two\n- three\n"


def test_parts_are_the_changed_blocks_and_apply_rebuilds_any_subset():
    patched = "# Agent\n- one\n- rule A\n- two\n- three\n- rule B\n"
    found = parts(BASE, patched)
    assert [part.new for part in found] == [("- rule A\n",), ("- rule B\n",)]
    assert apply(BASE, found) == patched and apply(BASE, []) == BASE
    assert apply(BASE, found[1:]) == "# Agent\n- one\n- two\n- three\n- rule B\n"


def test_a_part_is_kept_only_when_its_removal_lowers_a_target_significantly():
    """Sixteen trials a side: a rule that lifts its bucket 0.5 -> 0.9 is kept; a drop of two
    passes in sixteen, noise at these sizes, is not, where a fixed margin of 0.05 kept it."""
    rule = [(1.0, 1.0)] * 15 + [(0.4, 0.0)]
    assert removal_p({"s/a": rule}, {"s/a": [(1.0, 1.0)] * 8 + [(0.4, 0.0)] * 8}) < 0.02
    assert removal_p({"s/a": rule}, {"s/a": [(1.0, 1.0)] * 13 + [(0.4, 0.0)] * 3}) > KEEP_BELOW
    assert removal_p({"s/a": rule}, {"s/a": rule}) == 1.0
    assert removal_p({"s/a": rule, "s/b": rule}, {"s/a": rule, "s/b": [(1.0, 1.0)] * 8 + [(0.4, 0.0)] * 8}) < 0.05


def test_each_target_keeps_the_part_that_helps_it_most_though_its_help_is_not_significant():
    """Two targets, a rule for each and a stray line: rule B lifts its bucket too little to show
    at these trials, yet the gate will ask b to improve, so rule B stays; the stray line goes."""
    patched = BASE + "- rule A\n- rule B\n- stray line\n"

    def score(text: str, label: str) -> dict[str, list[tuple[float, float]]]:
        a = [(1.0, 1.0)] * (15 if "rule A" in text else 8) + [(0.4, 0.0)] * (1 if "rule A" in text else 8)
        b = [(1.0, 1.0)] * (15 if "rule B" in text else 13) + [(0.4, 0.0)] * (1 if "rule B" in text else 3)
        return {"s/a": a, "s/b": b}

    result = ablate(BASE, patched, score)
    assert [part.new for part in result.kept] == [("- rule A\n",), ("- rule B\n",)]
    assert result.p_values["part 1"] < KEEP_BELOW < result.p_values["part 2"] and result.p_values["part 3"] == 1.0


def test_a_part_whose_removal_leaves_the_targets_as_they_are_is_dropped_and_one_is_always_kept():
    patched = "# Agent\n- one\n- rule A\n- two\n- three\n- rule B\n"

    def score(text: str, label: str) -> dict[str, list[float]]:  # only rule A helps the target
        return {"s/a": [(0.9, 1.0) if "rule A" in text else (0.5, 0.0)] * 8}

    result = ablate(BASE, patched, score)
    assert [part.new for part in result.kept] == [("- rule A\n",)] and result.text == apply(BASE, result.kept)
    assert "dropped 1 of 2 changed part(s)" in result.summary() and "rule B" in result.summary()
    assert result.trials == 24 and result.scores["without 1"] == 0.5 and result.scores["without 2"] == 0.9
    neither = ablate(BASE, patched, lambda text, label: {"s/a": [(0.5, 0.0)] * 4})
    assert len(neither.kept) == 1 and len(neither.dropped) == 1, "never everything dropped"
    both = ablate(BASE, patched, lambda text, label: {"s/a": [(0.9, 1.0) if "rule A" in text and "rule B" in text
                                                                      else (0.8, 1.0)] * 4})
    assert not both.dropped
    two_targets = ablate(BASE, patched, lambda text, label: {"s/a": [(0.9, 1.0) if "rule A" in text else (0.5, 0.0)] * 4,
                                                             "s/b": [(0.9, 1.0) if "rule B" in text else (0.5, 0.0)] * 4})
    assert not two_targets.dropped, "each rule helps its own target: both kept"
    pass_rate_only = ablate(BASE, patched, lambda text, label: {"s/a": [(0.8, 1.0 if "rule A" in text else 0.0)] * 4})
    assert [part.new for part in pass_rate_only.kept] == [("- rule A\n",)], "a pass-rate effect is an effect"
    assert ablate(BASE, "# Agent\n- one\n- two\n- three\n- rule B\n", score) is None, "one part: nothing to leave out"


def test_a_ride_along_line_is_dropped_before_the_gate_and_never_reaches_the_branch(cli, repo, tmp_path, monkeypatch):
    """The patch adds the target's rule and, elsewhere, a line that harms another bucket: the
    ride-along is screened out, the rule alone is gated and committed."""
    script(tmp_path, monkeypatch, {"rationale": "rule and more", "edits": [
        {"search": "# Card Agent\n", "replace": f"# Card Agent\n\n{LINK_HARM}\n"},
        {"search": DATA_LINE, "replace": f"{DATA_LINE}\n{FACT_RULE}"}]})
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0, out + err
    assert "ablation: dropped 1 of 2 changed part(s)" in err and "Never use link" in err, err
    summary = json.loads((tmp_path / "run.json").read_text())
    proposal = summary["proposals"][0]
    assert proposal["status"] == "accepted", proposal
    committed = git(repo, "show", f"{proposal['branch']}:{PROMPT}")
    assert FACT_RULE in committed and LINK_HARM not in committed
    assert summary["screen_rollouts"] >= 48


def test_lines_inserted_side_by_side_are_parts_of_their_own():
    """The weak patcher appends its right rule and its stray line together: one diff block, two parts."""
    patched = BASE + "- rule A\n\n- stray line\n"
    found = parts(BASE, patched)
    assert [part.new for part in found] == [("- rule A\n", "\n"), ("- stray line\n",)]
    assert apply(BASE, found) == patched
    assert apply(BASE, found[:1]) == BASE + "- rule A\n\n" and apply(BASE, found[1:]) == BASE + "- stray line\n"
    replaced = parts(BASE, BASE.replace("- two\n", "- two, better\n- and more\n"))
    assert len(replaced) == 1, "a replaced block stays one part"


def test_a_decision_kept_in_its_file_is_reused_without_new_trials(tmp_path):
    """A resumed iteration that gets the same patch again screens nothing."""
    patched = BASE + "- rule A\n- stray line\n"
    calls = []

    def score(text: str, label: str) -> dict[str, list[tuple[float, float]]]:
        calls.append(label)
        return {"s/a": [(0.9, 1.0) if "rule A" in text else (0.5, 0.0)] * 4}

    first = ablate(BASE, patched, score, kept_file=tmp_path / "a.json")
    again = ablate(BASE, patched, score, kept_file=tmp_path / "a.json")
    assert len(calls) == 3 and again.text == first.text == BASE + "- rule A\n"
    assert again.summary() == first.summary()
