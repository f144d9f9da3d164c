"""`optimizer report --html`: the page's content, and (marker `browser`) that it renders in
headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from optimizer.reporting.html import build, render
from optimizer.store import Store, default_url
from tests.helpers import FACT_RULE, LINK_HARM, after_data_line, script
from tests.store_rows import add_iteration, add_nightly, add_run

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


@pytest.fixture
def report(cli, repo, tmp_path, monkeypatch):
    script(tmp_path, monkeypatch, after_data_line(FACT_RULE), after_data_line(LINK_HARM))
    code, out, err = cli("nightly", "--date", "2026-11-23", "--plain", "--max-iterations", "2")
    assert code == 0, out + err
    path = tmp_path / "report.html"
    code, out, err = cli("report", "--html", str(path))
    assert code == 0, out + err
    assert "2 iteration(s), 1 accepted" in out
    return path


def test_the_report_holds_tables_charts_proposals_and_failures(report):
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']https?://""", page), "the page must not fetch anything"
    buckets = page.split('id="buckets"')[1].split("</table>")[0]
    assert buckets.count("<tr") == 1 + 13  # header + the card suite's buckets
    assert "card_agent/fact_preservation *" in buckets
    for chart in ("chart-iterations", "chart-nights"):
        assert "<svg" in page.split(f'id="{chart}"')[1].split("</div>")[0]
    assert '">#1</a>: +' in buckets  # the accepted patch's paired change, beside its target's start and end
    assert 'href="#iteration-1"' in buckets and 'id="iteration-1"' in page  # each links to its iteration
    assert 'class="num up"' not in buckets and 'class="num down"' not in buckets, \
        "two samples of a few trials are not coloured as a change; the gate's verdicts are"
    assert page.count('class="proposal"') == 2
    assert 'data-status="accepted"' in page and 'data-status="rejected_gate"' in page
    assert '<span class="add">+' + FACT_RULE.replace("'", "&#39;") in page
    assert "no_harm" in page and "improvement" in page
    failures = page.split('id="failures"')[1].split("</table>")[0]
    assert failures.count("<tr") >= 2 and "card_" in failures
    assert "per accepted patch" in page


TRIVIAL = "card_agent/trivial_input"


def night_accepted_at_the_third_iteration(store: Store, *, then_one_more: bool) -> None:
    """Two rejected iterations on one baseline, then a patch for trivial_input that the gate
    measured 0.25 -> 0.50 on fresh pairs; the baseline's own trials of that bucket scored 0.50,
    and so did the candidate's fresh ones. With `then_one_more`, a fourth iteration measured the
    patched tip on the baseline's trials: 0.75."""
    baseline = add_run(store, "base-000001", "baseline", {"trivial_input": 0.5, "fact_preservation": 0.75}, 0)
    add_run(store, "conf-000003", "confirm", {"trivial_input": 0.25}, 5)
    candidate = add_run(store, "cand-000003", "candidate", {"trivial_input": 0.5, "fact_preservation": 0.75}, 6)
    ids = [add_iteration(store, "it-1", baseline, ["card_agent/template_link"], "rejected",
                         [{"status": "rejected_gate"}]),
           add_iteration(store, "it-2", baseline, ["card_agent/template_quote"], "rejected",
                         [{"status": "rejected_gate"}]),
           add_iteration(store, "it-3", baseline, [TRIVIAL], "accepted", [{
               "status": "accepted", "candidate_run_id": candidate, "buckets": [
                   {"suite": "card_agent", "bucket": "trivial_input", "before": 0.25, "after": 0.5, "change": 0.25,
                    "targeted": True, "pairs": 8, "p_improve": 0.01, "p_harm": 1.0},
                   {"suite": "card_agent", "bucket": "fact_preservation", "before": 0.75, "after": 0.75,
                    "change": 0.0, "targeted": False, "pairs": 8, "p_improve": 1.0, "p_harm": 1.0}]}])]
    if then_one_more:
        tip = add_run(store, "base-000004", "baseline", {"trivial_input": 0.75, "fact_preservation": 0.75}, 7)
        ids.append(add_iteration(store, "it-4", tip, ["card_agent/template_link"], "rejected",
                                 [{"status": "rejected_gate"}]))
    add_nightly(store, "night-1", ids, accepted=1)


def row_of(data: dict, bucket: str) -> dict:
    return next(row for row in data["table"] if row["bucket"] == bucket)


def test_a_night_ending_on_an_accepted_patch_shows_the_gates_paired_change_for_its_target(tmp_path):
    store = Store(default_url(tmp_path))
    night_accepted_at_the_third_iteration(store, then_one_more=False)
    data = build(store)
    trivial = row_of(data, TRIVIAL)
    assert (trivial["start"], trivial["end"], trivial["change"], trivial["paired"]) == (0.25, 0.5, 0.25, True)
    fact = row_of(data, "card_agent/fact_preservation")  # run at the baseline's own trials: the runs' means
    assert (fact["start"], fact["end"], fact["paired"]) == (0.75, 0.75, False)
    assert [(a["number"], a["change"]) for a in fact["accepted"]] == [(3, 0.0)]  # the gate's row for every bucket
    assert "card_agent/trivial_input * †" in render(data)


def test_the_end_is_the_baseline_that_measured_the_patched_tip_when_there_is_one(tmp_path):
    store = Store(default_url(tmp_path))
    night_accepted_at_the_third_iteration(store, then_one_more=True)
    data = build(store)
    trivial = row_of(data, TRIVIAL)
    assert (trivial["start"], trivial["end"], trivial["change"], trivial["paired"]) == (0.5, 0.75, 0.25, False)
    assert trivial["accepted"] == [{"number": 3, "change": 0.25, "pairs": 8, "verdict": ""}]
    chart = data["chart_iterations"]
    assert chart["labels"] == ["#1 start", "#2 start", "#3 start", "#4 start"]  # no candidate after the tip
    assert [c["bucket"] for c in chart["charts"]] == [TRIVIAL]  # moved and targeted: a chart of its own
    heights = [point["y"] for point in chart["charts"][0]["points"]]
    assert heights[0] == heights[2] > heights[3]  # 0.50 three times, then 0.75 drawn higher up
    assert chart["unchanged"] == [{"bucket": "card_agent/fact_preservation", "score": 0.75}]


def test_a_report_without_any_run_is_a_clear_error(cli, isolated, tmp_path):
    code, out, err = cli("report", "--html", str(tmp_path / "r.html"))
    assert code == 2 and "no nightly job or iteration" in err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.browser
def test_the_report_renders_in_headless_chromium(report, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "Chromium is not installed: `make test-browser` installs Debian's chromium package"
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run([chromium, *CHROMIUM_FLAGS, *profile, "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert '<h1 id="title">Nightly' in dom
    assert dom.count('class="proposal"') == 2
    charts = dom.split('id="chart-iterations"')[1].split("<h2>")[0]
    shown = re.findall(r'<figure class="multiple( targeted)?" data-bucket="([^"]+)"', charts)
    assert [bucket for _, bucket in shown] == ["card_agent/fact_preservation", "card_agent/template_metric"]
    assert all(mark for mark, _ in shown), "only the targeted buckets moved: one small chart each"
    assert f'data-shown="{len(shown)}"' in charts
    assert charts.count("<svg") == len(shown) and charts.count("<polyline") == len(shown)
    assert charts.count("<circle") == 2 * len(shown)  # two baselines, one point each
    assert "The same score at every point (no chart): multi_fact_day" in charts
    shot = tmp_path / "report.png"
    subprocess.run([chromium, *CHROMIUM_FLAGS, *profile, "--window-size=1280,2400", f"--screenshot={shot}",
                    report.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[0] == 2400 and pixels.shape[1] == 1280
    ink = (pixels[..., :3].mean(axis=2) < 0.85).mean()
    assert 0.01 < ink < 0.6, f"the screenshot looks blank or garbled ({ink:.1%} dark pixels)"
    coloured = ((pixels[..., 0] - pixels[..., 2]).__abs__() > 0.2).mean()
    assert coloured > 0.0005, "no coloured pixels: the charts or badges did not render"


def test_each_iteration_shows_its_baselines_spec_and_what_changed_since_the_last(report):
    iterations = report.read_text().split('id="iterations"')[1].split("</table>")[0]
    first, second = iterations.split('class="spec"')[1:]
    assert "litellm=" in first and "dspy=" in first and "changed since" not in first
    assert "changed since the last baseline: " in second and "agents.card_agent.prompt" in second


def test_the_report_charts_pass_rate_over_the_nights_with_the_accepted_patches_marked(tmp_path):
    from tests.viewer_store import build as build_nights

    store = Store(default_url(tmp_path))
    build_nights(store, nights=3)
    page = render(build(store))
    store.close()
    trends = page.split('id="chart-trends"')[1].split("</div>\n</div>")[0]
    for series in ("card_agent split train", "card_agent split holdout", "card_agent/fact_preservation"):
        assert f'data-series="{series}"' in trends
    charts = trends.count("<svg")
    assert charts == 3 and trends.count('class="patch"') == 3 * charts  # three nights' accepted patches
    assert trends.count("<circle") == 3 * charts  # a point per night's baseline
