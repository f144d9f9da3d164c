"""`optimizer review --format markdown`: a proposal's record as a pull request body, and the
example in docs/review-example.md, which must keep the layout the command prints."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT
from tests.helpers import project_repo

PROMPT = "agents/prompts/card_agent.md"
EXAMPLE = PROJECT_ROOT / "docs" / "review-example.md"
OUTPUT_MARK = "<!-- the output of `optimizer review --night latest` starts here -->"


@pytest.fixture
def accepted(cli, tmp_path, monkeypatch) -> Path:
    """A project whose one iteration was accepted: `make demo`'s set-up, the stand-in coding agent
    appending mock/sim's rule for the targeted bucket."""
    root = project_repo(tmp_path / "repo")
    monkeypatch.setenv("OPTIMIZER_ROOT", str(root))
    monkeypatch.setenv("OPTIMIZER_PROPOSER", "command")
    monkeypatch.setenv("OPTIMIZER_PROPOSER_COMMAND", f"{sys.executable} {PROJECT_ROOT / 'benchmarks/sim_patcher.py'} "
                                                     f"{{request}} {{workdir}} {PROMPT}")
    code, out, err = cli("run", "--json", str(tmp_path / "run.json"))
    assert code == 0 and json.loads((tmp_path / "run.json").read_text())["status"] == "accepted", out + err[-3000:]
    return root


def skeleton(markdown: str) -> list[str]:
    """What must not change between two reviews: the headings (code spans blanked), the table's
    header, and the gate's rule names in order."""
    lines = markdown.splitlines()
    headings = [re.sub(r"`[^`]*`", "`…`", line) for line in lines if line.startswith("#")]
    header = [line for line in lines if line.startswith("| bucket |")]
    rules = [re.sub(r"\*\*: .*", "", line) for line in lines if line.startswith("- ✅") or line.startswith("- ❌")]
    return headings + header + rules


def test_markdown_review_has_the_diff_the_bucket_table_the_rules_the_cost_and_the_changed_pairs_link(cli, accepted):
    code, out, err = cli("review", "--format", "markdown", "--viewer-url", "http://viewer.test:9000/")
    assert code == 0, out + err
    iteration = re.search(r"Iteration `([^`]+)`", out).group(1)
    assert out.startswith("## Prompt patch `optimizer/") and "**gate (strict, full): ACCEPTED**" in out
    assert [line for line in out.splitlines() if line.startswith("### ")] == [
        "### Diff", "### Gate", "### Cost", "### Changed pairs"]
    assert "```diff\n" in out and re.search(r"^\+- \w", out, re.M) and "<details>" not in out  # short: open
    row = next(line for line in out.splitlines() if line.startswith("| \\* card\\_agent/"))
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert float(cells[3]) > float(cells[2]) and re.fullmatch(r"\\\[[+-]\d\.\d\d, [+-]\d\.\d\d\\\]", cells[5]), row
    assert "- ✅ **improvement**:" in out and "- ✅ **no\\_harm**:" in out
    assert re.search(r"- patcher `\$\d+\.\d{4}` \([\d,]+ tokens\), rerun `\$\d+\.\d{4}` over \d+ rollouts", out)
    assert f"(http://viewer.test:9000/iterations/{iteration}/changed)" in out
    assert "│" not in out and "[bold" not in out, "console markup leaked into the markdown"


def test_merging_from_a_markdown_review_keeps_the_note_off_the_body(cli, accepted):
    code, out, err = cli("review", "--format", "markdown", "--merge")
    assert code == 0, out + err
    assert out.startswith("## Prompt patch") and "merged optimizer/" in err and "merged optimizer/" not in out


def test_a_long_diff_is_collapsed_and_cut_to_the_size_cap_with_a_note():
    from optimizer.reporting.review import Review
    from optimizer.reporting.review_markdown import render_markdown

    diff = "\n".join(["--- a/p.md", "+++ b/p.md", "@@ -1 +1,500 @@"] + [f"+line {n} ```" for n in range(500)])
    review = Review(proposal={"branch": "optimizer/x/card_agent-1", "status": "rejected", "iteration_id": "x",
                              "reason": "no improvement", "usage": {}, "rollouts": 0, "decision": None},
                    iteration={"base_ref": "main", "base_commit": "a" * 40, "targets": ["card_agent/b"]},
                    diff=diff, diff_source="$ git diff aaaa..optimizer/x/card_agent-1", rerun_cost=0.0, judges=[])
    whole = render_markdown(review)
    assert "<details><summary>503 lines:" in whole and "+line 499 ```" in whole and "Diff cut" not in whole
    assert "````diff" in whole, "a fence longer than any backtick run in the diff"
    cut = render_markdown(review, limit=4000)
    assert len(cut) <= 4000 and "+line 499" not in cut
    assert re.search(r"_Diff cut at \d+ of 503 lines to fit a pull request; the whole diff: "
                     r"`git diff aaaaaaaaaaaa\.\.optimizer/x/card_agent-1`\._", cut)
    assert cut.rstrip().endswith("folder: `iterations/x/changed.html`). Request: `None`; report: `None`."), \
        "without a viewer address its readers reach, the review names the pages instead of linking to localhost"


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[Path, str]:
    """A mock night of four accepts (mock/sim, the stand-in coding agent appending the rule for
    each targeted bucket), its store outside the repository as on a CI machine; the repository and
    the night's pull-request body."""
    import subprocess

    tmp_path = tmp_path_factory.mktemp("night")
    root = project_repo(tmp_path / "repo")
    env = {**os.environ, "OPTIMIZER_ROOT": str(root), "OPTIMIZER_STATE_DIR": str(tmp_path / "state"),
           "OPTIMIZER_PROPOSER": "command", "OPTIMIZER_AGENT_MODEL": "mock/sim", "OPTIMIZER_JUDGE_MODEL": "mock/sim",
           "OPTIMIZER_PROPOSER_COMMAND": f"{sys.executable} {PROJECT_ROOT / 'benchmarks/sim_patcher.py'} "
                                         f"{{request}} {{workdir}} {PROMPT}", "OPTIMIZER_RETRY_BASE_DELAY": "0.01"}
    optimizer = str(Path(sys.executable).parent / "optimizer")
    done = subprocess.run([optimizer, "nightly", "--plain", "--date", "2026-11-23", "--max-iterations", "4"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    body = subprocess.run([optimizer, "review", "--night", "latest"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert body.returncode == 0, body.stderr
    return root, body.stdout


@pytest.mark.slow
def test_a_nights_pull_request_body_reviews_every_patch_and_names_no_path_of_this_machine(night):
    root, body = night
    assert re.match(r"## Prompt night `[\w-]+`: 4 patch\(es\) stacked on the branch\n", body), body[:600]
    patches = re.findall(r"^### (\d)\. `(optimizer/[^`]+)`: stacked$", body, re.M)
    assert [number for number, _ in patches] == ["1", "2", "3", "4"]
    assert body.count("#### Gate") == 4 and body.count("```diff") == 4
    assert body.count("**gate (strict, full): ACCEPTED**") == 4
    assert "`optimizer view`, page `/night/" in body and "127.0.0.1" not in body
    log = subprocess_git(root, "log", "--format=%B", "main..optimizer/nightly-2026-11-23")
    assert log.count("Request: <state folder>/runs/") == 4
    for text in (body, log):
        for machine in (str(root.parent), str(Path.home()), str(PROJECT_ROOT)):
            assert machine not in text


def subprocess_git(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_the_review_example_in_the_docs_has_the_layout_the_command_prints(night):
    _, out = night
    example = EXAMPLE.read_text().split(OUTPUT_MARK, 1)
    assert len(example) == 2, f"{EXAMPLE} lost its mark {OUTPUT_MARK!r}"
    assert skeleton(example[1]) == skeleton(out), \
        "docs/review-example.md no longer matches the command: regenerate it as the page says"
    for machine in ("/tmp/", "/work/", "/home/", "/root", str(PROJECT_ROOT)):
        assert machine not in example[1], f"docs/review-example.md shows a path of the machine it was made on: {machine}"


def _review(diff: str, targets: list[str]):
    from optimizer.reporting.review import Review

    return Review(proposal={"branch": "optimizer/x/card_agent-1", "status": "accepted", "iteration_id": "x",
                            "reason": "accepted", "usage": {}, "rollouts": 0, "decision": None},
                  iteration={"base_ref": "main", "base_commit": "a" * 40, "targets": targets},
                  diff=diff, diff_source="$ git diff aaaa..optimizer/x/card_agent-1", rerun_cost=0.0, judges=[])


def test_one_very_long_line_cannot_hide_the_rest_of_the_diff():
    """A patch with a 70,000-character line used to push the whole 40-line diff out of the body."""
    from optimizer.reporting.review_markdown import render_markdown

    lines = [f"+rule {n}" for n in range(40)]
    lines[5] = "+" + "x" * 70_000
    markdown = render_markdown(_review("\n".join(["--- a/p.md", "+++ b/p.md", "@@ -1 +1,40 @@", *lines]),
                                       ["card_agent/b"]))
    assert "Diff cut" not in markdown and "+rule 39" in markdown and "+rule 0" in markdown
    assert "(69,601 more characters on this line)" in markdown


def test_a_target_name_in_the_heading_is_text_not_html():
    from optimizer.reporting.review_markdown import render_markdown

    markdown = render_markdown(_review("", ["card_agent/<img src=x onerror=alert(1)>", "s/with`tick"]))
    heading = next(line for line in markdown.splitlines() if line.startswith("**"))
    assert "`card_agent/<img src=x onerror=alert(1)>`" in heading, "inside a code span, shown as text"
    assert "``s/with`tick``" in heading
