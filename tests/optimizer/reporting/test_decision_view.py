"""A gate decision is rendered once: the CLI table and `report.md` show the same cells, from a
live decision or from the dict the store keeps."""

from __future__ import annotations

import json
import math

from rich.console import Console

from optimizer.cli._common import render_decision
from optimizer.reporting.decision_view import MISSING, NON_VOTING, decision_view
from optimizer.gate import BucketChange, Decision, RuleResult
from optimizer.loop.render import decision_lines


def decision() -> Decision:
    target = BucketChange(suite="card_agent", bucket="fact_preservation", tasks=2, pairs=16, before=0.5, after=0.75,
                          change=0.25, p_improve=0.02, p_harm=1.0, targeted=True, ci_low=0.1,
                          ci_high=0.4, verdict="improved")
    unjudged = BucketChange(suite="card_agent", bucket="template_link", tasks=1, pairs=8, before=math.nan,
                            after=math.nan, change=0.0, p_improve=1.0, p_harm=1.0, verdict="unjudged")
    return Decision(accepted=False, mode="strict", stage="full", rules=[
        RuleResult("improvement", True, "card_agent/fact_preservation 0.50 -> 0.75"),
        RuleResult("no_harm", False, "card_agent/template_person fell -0.30")], buckets=[target, unjudged],
        overall={"before": 0.6, "after": 0.7, "change": 0.1, "tasks": 3, "pairs": 24}, holdout={}, excluded_pairs=0,
        rollouts=48, capped=True, non_voting=["pkm_insight_quality"])


def test_a_decision_reads_the_same_live_and_as_stored():
    live = decision_view(decision())
    stored = decision_view(json.loads(json.dumps(decision().as_dict())))
    assert stored == live
    assert [row.cells for row in live.rows] == [
        ("* card_agent/fact_preservation", "16", "0.50", "0.75", "+0.25", "[+0.10, +0.40]", "improved", "0.020",
         "1.000", MISSING),
        ("card_agent/template_link", "8", MISSING, MISSING, "+0.00", MISSING, "unjudged", "1.000", "1.000", MISSING),
        ("overall (train)", "24", "0.60", "0.70", "+0.10", MISSING, MISSING, MISSING, MISSING, MISSING)]
    old = decision().as_dict()
    old["buckets"][0].update(p_improve=0.01, p_improve_holm=0.02)  # recorded before the intersection-union test
    assert decision_view(old).rows[0].cells == live.rows[0].cells
    assert live.notes == ["pass improvement: card_agent/fact_preservation 0.50 -> 0.75",
                          "FAIL no_harm: card_agent/template_person fell -0.30",
                          f"{NON_VOTING}: pkm_insight_quality", "48 trials (budget reached)"]


def test_the_cli_table_and_the_markdown_report_show_the_same_cells_and_notes():
    view = decision_view(decision())
    console = Console(width=240, record=True)
    console.print(render_decision(decision().as_dict()))
    table = console.export_text()
    markdown = "\n".join(decision_lines(decision()))
    for row in view.rows:
        line = next(line for line in table.splitlines() if row.name in line)
        assert [cell.strip() for cell in line.split("│") if cell.strip()] == list(row.cells)
        assert "| " + " | ".join(row.cells) + " |" in markdown
    for note in view.notes:
        assert note in table and f"- {note}" in markdown
    assert view.title in table
