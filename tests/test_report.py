"""`optimizer report --html`: the page's content, and (marker `browser`) that it renders in
headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.test_loop import FACT_RULE, LINK_HARM, after_data_line, repo, script  # noqa: F401

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
    assert page.count('class="proposal"') == 2
    assert 'data-status="accepted"' in page and 'data-status="rejected_gate"' in page
    assert '<span class="add">+' + FACT_RULE.replace("'", "&#39;") in page
    assert "no_harm" in page and "improvement" in page
    failures = page.split('id="failures"')[1].split("</table>")[0]
    assert failures.count("<tr") >= 2 and "card_" in failures
    assert "per accepted patch" in page


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
    assert dom.count("<svg") >= 2 and dom.count('class="proposal"') == 2
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
