"""`optimizer view`: the server's pages over a hand-built store (escaping, filters, bad ids,
read-only), the command's exit-2 errors, and (marker `browser`) a click-through in headless
Chromium on a store made by a mock/sim iteration."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from optimizer.store import Store, default_url
from optimizer.viewer import ViewerServer
from tests.helpers import PROJECT_ROOT
from tests.viewer_store import INJECTION, add_reusing_night, build


@pytest.fixture
def store_path(isolated) -> Path:
    store = Store(default_url(isolated))
    build(store)
    add_reusing_night(store)
    store.close()
    return isolated / "optimizer.db"


@pytest.fixture
def get(store_path):
    server = ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def fetch(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}{path}", timeout=10) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    yield fetch
    server.shutdown()
    server.server_close()


def test_the_first_page_lists_runs_and_iterations_with_links(get):
    status, page = get("/")
    assert status == 200
    # in its row and as the baseline of both iterations
    assert re.findall(r'href="/run/([^"]+)"', page).count("base-0") == 3
    assert 'href="/iteration/it-0"' in page and "accepted" in page
    assert 'href="/night/night-0"' in page
    assert "1 night(s) · 2 iteration(s) · 4 run(s) · page 1 of 1" in page


def test_an_iteration_that_paired_with_an_earlier_iterations_base_trials_shows_its_pairs(get):
    """The gate of a night's second iteration paired its candidate with base-prompt trials the
    first one ran; the viewer pairs by the runs the iteration's record names, not by time."""
    status, page = get("/pairs/it-0-b?proposal=2")
    assert status == 200
    assert "4 pair(s) whose outcome changed" in page and "2 fell" in page and "2 rose" in page
    directions = re.findall(r'data-direction="(\w+)"', page)
    assert directions == ["down", "down", "up", "up"]  # regressions first


def test_the_iteration_page_links_each_bucket_of_the_gate_table_to_its_pairs(get):
    status, page = get("/iteration/it-0-b")
    assert status == 200 and 'class="gate"' in page and 'href="/night/night-0"' in page
    fell = re.search(r'<td>card_agent/fact_preservation</td>.*?<a class="fell" href="([^"]+)"', page, re.S).group(1)
    assert "bucket=fact_preservation" in fell and "direction=down" in fell
    status, page = get(fell.replace("&amp;", "&"))
    assert status == 200
    assert re.findall(r'data-bucket="(\w+)"', page) == ["fact_preservation", "fact_preservation"]
    assert set(re.findall(r'data-direction="(\w+)"', page)) == {"down"}
    assert "card_task_2 #2 · fact_preservation: passed &rarr; failed" in page
    status, page = get("/pairs/it-0-b?proposal=2&bucket=template_event&direction=down")
    assert status == 200 and 'id="no-pairs"' in page
    assert get("/pairs/it-0-b?direction=sideways")[0] == 400


def test_a_night_page_lists_its_iterations_in_order_with_what_became_of_each(get):
    status, page = get("/night/night-0")
    assert status == 200 and "stopped: max_iterations (2)" in page
    rows = re.findall(r'<a class="iteration" href="/iteration/([^"]+)"', page)
    assert rows == ["it-0", "it-0-b"]
    assert "fact_preservation fell" in page and get("/night/nope")[0] == 404


def test_transcripts_are_searched_and_a_hit_shows_where_it_occurs(get):
    status, page = get("/search?q=STANDUP")
    assert status == 200
    hits = re.findall(r'<a class="trial" href="/trial/(\d+)"', page)
    assert len(hits) == 28 and 'id="next"' not in page  # every trial but the four whose note is the injection
    assert hits == sorted(hits, key=int, reverse=True) and "Standup" in page
    status, page = get("/search?q=no+such+words+anywhere")
    assert status == 200 and "No trial holds it." in page
    assert get("/search?q=" + "x" * 201)[0] == 400


def test_a_trial_page_shows_why_it_failed_before_the_transcript_and_its_cost(get):
    status, page = get("/trial/3")
    assert status == 200
    assert page.index('class="graders"') < page.index('class="msg system"')
    assert "prompt + " in page and "completion tokens" in page
    status, page = get("/run/base-0")
    assert status == 200 and 'id="usage"' in page and "8 trial(s) match · page 1 of 1" in page


def test_a_transcript_is_shown_as_text_never_as_markup(get):
    status, page = get("/run/base-0?task=card_task_1")
    trial_id = re.findall(r'href="/trial/(\d+)"', page)[0]
    status, page = get(f"/trial/{trial_id}")
    assert status == 200
    assert "<script>document" not in page and "<img src=x" not in page
    assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in page
    for part in ("# Card Agent", "save_timeline_card", "call_1", "saved", "card_must_contain", "checked",
                 "&#34;cards&#34;"):
        assert part in page, part


def test_trials_are_filtered_by_outcome_ending_and_task(get):
    def trial_rows(query: str) -> list[str]:
        status, page = get(f"/run/base-0?{query}")
        assert status == 200
        return re.findall(r'<tr data-status="(\w+)">', page)

    assert len(trial_rows("")) == 8
    assert trial_rows("outcome=passed") == ["passed", "passed"]
    assert len(trial_rows("outcome=failed&task=task_3")) == 2
    assert trial_rows("ending=completed&task=card_task_0") == ["passed", "passed"]
    assert trial_rows("task=no_such_task") == []


def test_an_iterations_changed_pairs_show_the_prompt_diff_and_both_transcripts(get):
    status, page = get("/iteration/it-0")
    assert status == 200 and "/pairs/it-0?proposal=1" in page
    assert "Facts were paraphrased away." in page and "fact_preservation improved" in page
    status, page = get("/pairs/it-0?proposal=1")
    assert status == 200
    assert "2 pair(s) whose outcome changed" in page
    assert page.count('data-direction="up"') == 2 and page.count('class="transcript"') == 4
    assert "card_task_1 #0" in page and "failed &rarr; passed" in page
    assert '<span class="add">+Keep every fact of the note.</span>' in page
    assert page.index("Prompt diff") < page.index('data-direction=')
    # side by side, the long system prompt is folded away (the diff says what changed); a trial's own page shows it
    folded = page.split("<details>")[1:]
    assert len(folded) == 4 and all("Turn a note into a card." in part.split("</details>")[0] for part in folded)


def test_the_address_a_markdown_review_links_to_shows_the_accepted_proposals_changed_pairs(get):
    from optimizer.reporting.review import changed_pairs_url

    status, page = get(changed_pairs_url("", "it-0"))
    assert status == 200 and "2 pair(s) whose outcome changed" in page
    assert get("/iterations/it-0/other")[0] == 404


@pytest.mark.parametrize("path, status", [("/trial/abc", 400), ("/trial/99999", 404), ("/run/nope", 404),
                                          ("/iteration/nope", 404), ("/pairs/it-0?proposal=9", 404),
                                          ("/run/base-0?page=x", 400), ("/no/such/page", 404)])
def test_bad_ids_are_404_and_malformed_ones_400(get, path, status):
    assert get(path)[0] == status


def test_the_trend_page_charts_pass_rate_per_bucket_and_split_with_the_accepted_patch(get):
    status, page = get("/trends")
    assert status == 200
    for series in ("card_agent split train", "card_agent split holdout", "card_agent/fact_preservation"):
        assert f'data-series="{series}"' in page
    assert page.count('class="patch"') == page.count("<svg")  # the one accepted patch, in every chart
    assert "0.25 &rarr;" in page.split('data-series="card_agent/fact_preservation"')[1]


def test_the_viewer_never_writes_the_store(store_path, get):
    before = hashlib.sha256(store_path.read_bytes()).hexdigest()
    for path in ("/", "/run/base-0", "/trial/1", "/iteration/it-0", "/pairs/it-0", "/trends"):
        assert get(path)[0] == 200, path
    assert hashlib.sha256(store_path.read_bytes()).hexdigest() == before
    from optimizer.viewer import Reader, open_engine
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError
    engine = open_engine(f"sqlite:///{store_path}")
    with pytest.raises(OperationalError, match="readonly"), engine.connect() as conn:
        conn.execute(text("DELETE FROM trials"))
    assert Reader(engine).trial(1) is not None


def test_the_viewer_reads_either_database_and_refuses_to_write_it(store_url):
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from optimizer.viewer import Reader, open_engine

    store = Store(store_url)
    ids = build(store)
    store.close()
    engine = open_engine(store_url)
    reader = Reader(engine)
    assert len(reader.changed_pairs(reader.base_runs(reader.iteration(ids["iteration"])), ids["candidate"])) == 2
    assert len(reader.search("standup", 0)) == 12 and reader.search("STANDUP AT", 0) == []
    with pytest.raises(DBAPIError, match="(?i)read.?only"), engine.connect() as conn:
        conn.execute(text("DELETE FROM grader_results"))
    assert reader.trial(1)["graders"]
    engine.dispose()


def test_a_missing_store_is_exit_2(cli, isolated):
    code, out, err = cli("view", "--port", "0")
    assert code == 2
    assert "no store at" in err and "optimizer.db" in err


def test_an_unreachable_database_is_exit_2(cli, isolated, monkeypatch, free_tcp_port):
    monkeypatch.setenv("OPTIMIZER_DATABASE_URL", f"postgresql+psycopg://nobody:secret@127.0.0.1:{free_tcp_port}/none")
    code, out, err = cli("view", "--port", "0")
    assert code == 2
    assert "cannot open the store at" in err and "database_url" in err and "secret" not in err


def test_a_busy_port_is_exit_2(cli, store_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, out, err = cli("view", "--port", str(taken.getsockname()[1]))
    assert code == 2
    assert "is busy" in err and "--port" in err


SCREENSHOT = "VIEWER_SCREENSHOT"
"""Where the browser test saves its shot of the changed pairs (docs/viewer-screenshot.png was
made with `VIEWER_SCREENSHOT=docs/viewer-screenshot.png make test-browser`); else the test's folder."""


@pytest.fixture
def browser():
    """Headless Chromium driven through Debian's chromedriver (`make test-browser` installs both)."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver")
    assert driver_path, "chromedriver is not installed: `make test-browser` installs Debian's chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()


@pytest.mark.browser
def test_a_reviewer_clicks_from_the_runs_to_the_changed_pairs_and_a_transcript(cli, repo, monkeypatch, browser,
                                                                                 tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from optimizer.settings.loading import load_settings

    # the demo's stand-in coding agent: it appends the rule mock/sim rewards for the targeted bucket
    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")
    monkeypatch.setenv("OPTIMIZER_PROPOSER_COMMAND", f"{sys.executable} {PROJECT_ROOT / 'benchmarks/sim_patcher.py'} "
                                                     "{request} {workdir} agents/prompts/card_agent.md")
    code, out, err = cli("run", "--agent-model", "mock/sim")
    assert code == 0, out + err
    settings = load_settings(repo)
    server = ViewerServer(settings.database_url or default_url(repo / settings.state_dir), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        assert browser.title.startswith("Runs and iterations")
        browser.find_element(By.CSS_SELECTOR, "a.iteration").click()
        assert browser.title.startswith("Iteration ")
        browser.find_element(By.CSS_SELECTOR, "a.pairs").click()
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Changed pairs of optimizer/")
        assert browser.find_element(By.CSS_SELECTOR, "pre.diff span.add").text.startswith("+")
        pairs = browser.find_elements(By.CSS_SELECTOR, "div.pair")
        assert pairs, "the accepted rule changes the outcome of some pairs"
        assert len(pairs[0].find_elements(By.CSS_SELECTOR, "div.side > div")) == 2
        shot = Path(os.environ.get(SCREENSHOT) or tmp_path / "pairs.png")
        assert browser.save_screenshot(str(shot)) and shot.read_bytes().startswith(b"\x89PNG")
        pairs_url = browser.current_url
        pairs[0].find_element(By.CSS_SELECTOR, "div.candidate a[href^='/trial/']").click()
        assert browser.title.startswith("Trial card_agent/")
        roles = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "div.msg > b")]
        assert roles[:2] == ["system", "user"] and "assistant" in roles
        assert browser.find_elements(By.CSS_SELECTOR, "table.graders tbody tr")
        browser.find_element(By.CSS_SELECTOR, "a[href^='/run/']").click()
        Select(browser.find_element(By.NAME, "outcome")).select_by_visible_text("failed")
        browser.find_element(By.ID, "apply").click()
        WebDriverWait(browser, 10).until(lambda page: "outcome=failed" in page.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "#trials tr[data-status]")
        statuses = {row.get_attribute("data-status") for row in rows}
        assert statuses <= {"failed"}
        browser.back()
        browser.back()
        browser.back()
        assert browser.current_url == pairs_url
        assert browser.find_elements(By.CSS_SELECTOR, "div.pair")
    finally:
        server.shutdown()
        server.server_close()


def _raw_get(server: ViewerServer, host: str) -> int:
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as conn:
        conn.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return int(conn.recv(64).split()[1])


@pytest.mark.parametrize("host, status", [("127.0.0.1:{port}", 200), ("localhost:{port}", 200), ("[::1]:{port}", 200),
                                          ("attacker.example:{port}", 421), ("attacker.example", 421), ("", 421)])
def test_a_host_the_viewer_does_not_serve_is_refused_421(store_path, host, status):
    """DNS rebinding: a page at attacker.example whose name now resolves to 127.0.0.1 sends its
    own name as Host; it must not read the transcripts."""
    server = ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert _raw_get(server, host.format(port=server.server_address[1])) == status
    finally:
        server.shutdown()
        server.server_close()


def test_an_idle_connection_is_closed_after_the_read_timeout(store_path, monkeypatch):
    monkeypatch.setattr("optimizer.viewer.server.Handler.timeout", 0.5)
    server = ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as idle:
            assert idle.recv(64) == b"", "the server closed the silent connection"
    finally:
        server.shutdown()
        server.server_close()


def test_closing_the_server_waits_for_a_page_being_built_before_closing_the_store(store_path, monkeypatch):
    """The store's connections are closed only once no request thread reads them: closing one
    under a query running in another thread crashed the process (seen once in the browser test)."""
    from optimizer.viewer import server as module

    building, release, disposed = threading.Event(), threading.Event(), threading.Event()
    real_render = module.render

    def slow_render(*args):
        building.set()
        assert release.wait(10)
        return real_render(*args)

    monkeypatch.setattr(module, "render", slow_render)
    server = ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)
    real_dispose = server.reader.engine.dispose
    monkeypatch.setattr(server.reader.engine, "dispose", lambda: (disposed.set(), real_dispose()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    replies: list[int] = []
    request = threading.Thread(target=lambda: replies.append(_raw_get(server, "127.0.0.1")))
    request.start()
    assert building.wait(10), "the page is being built"
    server.shutdown()
    closing = threading.Thread(target=server.server_close)
    closing.start()
    assert not disposed.wait(0.5), "the store stays open while the page reads it"
    assert not server.begin_read(), "no other page starts once the server is closing"
    release.set()
    request.join(10)
    closing.join(10)
    assert replies == [200] and disposed.is_set() and not closing.is_alive()


def test_a_huge_transcript_is_shown_cut_with_what_was_left_out(isolated):
    from tests.viewer_store import add_run, trial

    store = Store(default_url(isolated))
    huge = trial("card_task_0", 0, "failed")
    huge.transcript.tool_calls[0].result = "x" * 5_000_000
    huge.transcript.messages.extend({"role": "user", "content": f"turn {n}"} for n in range(1000))
    add_run(store, "huge", "baseline", [huge], 0)
    store.close()
    server = ViewerServer(f"sqlite:///{isolated / 'optimizer.db'}", "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/run/huge", timeout=10) as reply:
            trial_id = re.findall(r'href="/trial/(\d+)"', reply.read().decode())[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/trial/{trial_id}", timeout=30) as reply:
            page = reply.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert len(page) < 1_000_000
    assert "4,980,000 more characters not shown" in page
    assert "more messages not shown" in page and "turn 10" in page


def test_viewing_beyond_this_machine_warns(cli, store_path, monkeypatch):
    from optimizer.viewer import server as viewer_server

    monkeypatch.setattr(viewer_server.ViewerServer, "serve_forever", lambda self: None)
    code, out, err = cli("view", "--host", "0.0.0.0", "--port", "0")
    assert code == 0, out + err
    assert "warning: listening on 0.0.0.0, not this machine only" in err
    code, out, err = cli("view", "--port", "0")
    assert code == 0 and "warning" not in err, out + err


def test_an_export_writes_static_pages_whose_links_lead_to_each_other(store_path, tmp_path):
    from optimizer.viewer.export import LEFT_OUT, export, file_for

    folder = tmp_path / "bundle"
    written, left_out = export(f"sqlite:///{store_path}", folder)
    assert left_out == 0 and written == len(list(folder.rglob("*.html"))) - 1  # and the left-out page
    index = (folder / "index.html").read_text()
    assert 'href="night/night-0.html"' in index and "<form" not in index
    for page in folder.rglob("*.html"):
        for href in re.findall(r'href="([^"]+)"', page.read_text()):
            assert (page.parent / href).resolve().is_file(), (page, href)
    pairs = (folder / file_for("/iteration/it-0-b")).read_text()
    fell = re.search(r'<td>card_agent/fact_preservation</td>.*?<a class="fell" href="([^"]+)"', pairs, re.S).group(1)
    assert "card_task_2 #2" in (folder / "iteration" / fell).read_text()
    changed = folder / "iterations" / "it-0-b" / "changed.html"  # the page a review body names
    assert "card_task_2 #2" in changed.read_text()
    written, left_out = export(f"sqlite:///{store_path}", tmp_path / "small", pages=3)
    assert written == 3 and left_out > 0
    assert f'href="{LEFT_OUT}"' in (tmp_path / "small" / "index.html").read_text()


def test_an_export_into_a_folder_holding_other_files_is_exit_2(cli, store_path, isolated):
    (isolated / "notes").mkdir()
    (isolated / "notes" / "a.txt").write_text("mine")
    code, out, err = cli("view", "--export", str(isolated / "notes"))
    assert code == 2 and "not empty" in err
    assert (isolated / "notes" / "a.txt").read_text() == "mine"
    (isolated / "a-file").write_text("x")
    code, out, err = cli("view", "--export", str(isolated / "a-file"))
    assert code == 2 and "is a file, not a folder" in err
    code, out, err = cli("view", "--export", str(isolated / "bundle"))
    assert code == 0 and "page(s) to" in out and (isolated / "bundle" / "index.html").is_file()


@pytest.mark.browser
def test_a_reviewer_goes_from_a_night_to_a_fallen_buckets_pairs_and_searches_the_transcripts(
        cli, repo, isolated, monkeypatch, browser):
    """A mock night of two iterations on one base; the second's gate reused the base-prompt trials
    the first ran (the case the changed-pairs page once showed as 0 pairs)."""
    from selenium.webdriver.common.by import By

    from optimizer.settings.loading import load_settings
    from tests.helpers import FACT_RULE, LINK_HARM, after_data_line, script

    # one line each (the ablation keeps it whole); two different patches of the same effect, since
    # a patch the gate already rejected at this base is not judged again
    both = f"{FACT_RULE} {LINK_HARM.removeprefix('- ')}"
    swapped = f"{LINK_HARM} {FACT_RULE.removeprefix('- ')}"
    script(isolated.parent, monkeypatch, after_data_line(both), after_data_line(swapped))
    code, out, err = cli("nightly", "--plain", "--max-iterations", "2", "--patience", "5")
    assert code == 0 and "reused" in err, out + err
    settings = load_settings(repo)
    server = ViewerServer(settings.database_url or default_url(repo / settings.state_dir), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{server.server_address[1]}/")
        browser.find_element(By.CSS_SELECTOR, "a.night").click()
        assert browser.title.startswith("Night ")
        iterations = browser.find_elements(By.CSS_SELECTOR, "#night-iterations a.iteration")
        assert len(iterations) == 2
        iterations[1].click()
        assert browser.title.startswith("Iteration ")
        row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "table.gate tbody tr")
                   if tr.find_element(By.TAG_NAME, "td").text == "card_agent/template_link")
        iteration_url = browser.current_url
        row.find_element(By.CSS_SELECTOR, "a.fell").click()
        pairs = browser.find_elements(By.CSS_SELECTOR, "div.pair")
        assert pairs, "the bucket that fell has pairs that went from passed to not passed"
        assert {pair.get_attribute("data-direction") for pair in pairs} == {"down"}
        assert {pair.get_attribute("data-bucket") for pair in pairs} == {"template_link"}
        pairs[0].find_element(By.CSS_SELECTOR, "div.candidate a[href^='/trial/']").click()
        assert browser.title.startswith("Trial card_agent/")
        assert browser.find_elements(By.CSS_SELECTOR, "table.graders tbody tr")
        browser.get(iteration_url)
        target = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "table.gate tbody tr")
                      if tr.find_element(By.TAG_NAME, "td").text.startswith("* card_agent/fact_preservation"))
        target.find_element(By.CSS_SELECTOR, "a.rose").click()
        assert browser.find_elements(By.CSS_SELECTOR, "div.pair[data-direction='up']"), \
            "the target's fresh pairs, whose base trials the first iteration ran, are found"
        box = browser.find_element(By.NAME, "q")
        box.send_keys("save_timeline_card")
        box.submit()
        assert browser.title.startswith("Search: save_timeline_card")
        hits = browser.find_elements(By.CSS_SELECTOR, "#found a.trial")
        assert len(hits) == 50 and browser.find_elements(By.ID, "next")
        hits[0].click()
        assert browser.title.startswith("Trial card_agent/")
    finally:
        server.shutdown()
        server.server_close()


def test_a_corrupt_or_newer_store_is_refused_before_a_page_is_served_or_an_export_overwritten(cli, store_path,
                                                                                             isolated):
    import sqlite3

    from optimizer.errors import ConfigError, StoreError

    code, out, err = cli("view", "--export", str(isolated / "bundle"))
    assert code == 0, err
    before = {path: path.read_bytes() for path in (isolated / "bundle").rglob("*.html")}
    with sqlite3.connect(store_path) as conn:
        conn.execute("UPDATE schema_version SET version = 999")
    conn.close()
    code, out, err = cli("view", "--export", str(isolated / "bundle"))
    assert code == 2 and "schema version 999, newer than this tool's" in err, err
    with pytest.raises(ConfigError, match="newer than this tool's"):
        ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)  # the server is refused before it listens
    store_path.write_bytes(b"\x17" * 30_000)  # no longer a SQLite file
    code, out, err = cli("view", "--export", str(isolated / "bundle"))
    assert code == 3 and "the store is corrupt" in err and "restore" in err, err
    with pytest.raises(StoreError, match="the store is corrupt"):
        ViewerServer(f"sqlite:///{store_path}", "127.0.0.1", 0)
    assert {path: path.read_bytes() for path in (isolated / "bundle").rglob("*.html")} == before
