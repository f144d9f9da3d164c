"""Every way out of the PKM sandbox is refused with a tool error, and nothing outside changes.

Links included: no symlink is followed, wherever it points, and a file with another hard link is
neither read nor written, by the tools or by the harness's own readers (reminders, the filed check,
snapshots, the edit history)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from prompt_optimizer_agents.pkm.agent import record_history
from prompt_optimizer_agents.pkm.reminders import load_history, reminders
from prompt_optimizer_agents.pkm.sandbox import MAX_WRITE_BYTES, Sandbox, SandboxError, read_file, write_file
from prompt_optimizer_agents.pkm.state import snapshot
from prompt_optimizer_agents.pkm.tools import PKMTools
from optimizer import Task

FACT_ID = "2026/05/25.md#ts_1"


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under root (symlinks by their target text, not followed)."""
    digests = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            digests[path.relative_to(root).as_posix()] = "link:" + os.readlink(path)
        elif path.is_file():
            digests[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


@pytest.fixture
def world(tmp_path):
    """A workspace with PKM/ inside and secrets beside it, plus symlinks planted inside PKM/."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("TOP SECRET\n", encoding="utf-8")
    (tmp_path / "sibling.md").write_text("sibling file\n", encoding="utf-8")
    pkm = tmp_path / "workspace" / "PKM"
    (pkm / "Areas").mkdir(parents=True)
    (pkm / "Areas" / "health.md").write_text("# Health\n- walk <!-- fact_id: fact_pkm_health_001 -->\n",
                                             encoding="utf-8")
    (pkm / "escape_dir").symlink_to(outside, target_is_directory=True)
    (pkm / "escape_file.md").symlink_to(outside / "secret.md")
    os.link(outside / "secret.md", pkm / "Areas" / "linked.md")  # the same file, under a name inside PKM/
    (pkm / "inside_link.md").symlink_to(pkm / "Areas" / "health.md")
    tools = PKMTools(Sandbox(pkm), FACT_ID)
    return tmp_path, outside, tools


def call(tools: PKMTools, name: str, **arguments):
    tool = next(t for t in tools.tools() if t.name == name)
    return tool.handler(arguments)


ESCAPES = [
    ("Read", {"path": "/etc/passwd"}, "absolute"),
    ("Read", {"path": "../../outside/secret.md"}, ".."),
    ("Read", {"path": "Areas/../../sibling.md"}, ".."),
    ("Read", {"path": "~/secret.md"}, "absolute"),
    ("Read", {"path": "C:\\Windows\\win.ini"}, "absolute"),
    ("Read", {"path": "escape_file.md"}, "symlink"),
    ("Read", {"path": "escape_dir/secret.md"}, "symlink"),
    ("Read", {"path": "Areas/health.md\x00.txt"}, "NUL"),
    ("Read", {"path": "x" * 300 + ".md"}, "longer than 255"),
    ("Read", {"path": "/".join(["abcdefgh"] * 130) + ".md"}, "longer than 1024"),
    ("BatchRead", {"paths": ["Areas/health.md", "../../outside/secret.md"]}, ".."),
    ("Write", {"path": "/tmp/owned.md", "content": "x"}, "absolute"),
    ("Write", {"path": "../owned.md", "content": "x"}, ".."),
    ("Write", {"path": "escape_dir/owned.md", "content": "x"}, "symlink"),
    ("Write", {"path": "escape_file.md", "content": "overwritten"}, "symlink"),
    ("Write", {"path": "Areas/big.md", "content": "x" * (MAX_WRITE_BYTES + 1)}, "1 MiB"),
    ("Write", {"path": "Areas/run.sh", "content": "echo hi"}, "Markdown"),
    ("Edit", {"path": "escape_file.md", "old_string": "TOP", "new_string": "NO"}, "symlink"),
    ("Edit", {"path": "../../outside/secret.md", "old_string": "TOP", "new_string": "NO"}, ".."),
    ("Move", {"src": "Areas/health.md", "dst": "../health.md"}, ".."),
    ("Move", {"src": "Areas/health.md", "dst": "escape_dir/health.md"}, "symlink"),
    ("Move", {"src": "escape_dir", "dst": "Areas/inside"}, "symlink"),
    ("Remove", {"path": "escape_dir/secret.md"}, "symlink"),
    ("Remove", {"path": "../../outside"}, ".."),
    ("Remove", {"path": ""}, "empty"),
    ("LS", {"path": "escape_dir"}, "symlink"),
    ("LS", {"path": "/"}, "absolute"),
    ("Glob", {"pattern": "/etc/*"}, "absolute"),
    ("Glob", {"pattern": "../*/*.md"}, ".."),
    ("Grep", {"pattern": "SECRET", "path": "escape_dir"}, "symlink"),
    ("Grep", {"pattern": "SECRET", "path": "../.."}, ".."),
    ("Read", {"path": "Areas/linked.md"}, "2 hard links"),
    ("BatchRead", {"paths": ["Areas/health.md", "Areas/linked.md"]}, "hard links"),
    ("Grep", {"pattern": "SECRET", "path": "Areas/linked.md"}, "hard links"),
    ("Write", {"path": "Areas/linked.md", "content": "overwritten"}, "hard links"),
    ("Edit", {"path": "Areas/linked.md", "old_string": "TOP", "new_string": "NO"}, "hard links"),
    ("Move", {"src": "Areas/linked.md", "dst": "Areas/moved.md"}, "hard links"),
    ("Remove", {"path": "Areas/linked.md"}, "hard links"),
    ("Read", {"path": "inside_link.md"}, "symlink"),
    ("Write", {"path": "inside_link.md", "content": "overwritten"}, "symlink"),
    ("Edit", {"path": "inside_link.md", "old_string": "Health", "new_string": "NO"}, "symlink"),
]


@pytest.mark.parametrize("name,arguments,reason", ESCAPES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(ESCAPES)])
def test_escape_is_refused_and_nothing_outside_changes(world, name, arguments, reason):
    root, outside, tools = world
    outside_before = tree_digest(outside)
    siblings_before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}
    output = call(tools, name, **arguments)
    assert output.is_error, output.text
    assert reason.lower() in output.text.lower()
    assert "TOP SECRET" not in output.text
    assert tree_digest(outside) == outside_before
    assert {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()} == siblings_before
    assert not (root / "owned.md").exists() and not Path("/tmp/owned.md").exists()
    assert not any(event["op"] in ("write", "edit", "move", "remove") for event in tools.events)


def test_a_refused_link_names_what_was_refused(world):
    _, _, tools = world
    assert json.loads(call(tools, "Read", path="Areas/linked.md").text)["error"] == [
        "path 'Areas/linked.md' refused: the file has 2 hard links (other names, which may be outside PKM/); "
        "the tools read and change only files with one link"]
    assert json.loads(call(tools, "Write", path="escape_dir/new.md", content="x").text)["error"] == [
        "path 'escape_dir/new.md' refused: 'escape_dir' is a symlink, and the tools never follow links"]


def test_a_symlink_inside_the_tree_is_not_followed_either(world):
    _, _, tools = world
    health = tools.sandbox.root / "Areas" / "health.md"
    before = health.read_bytes()
    assert call(tools, "Write", path="inside_link.md", content="replaced").is_error
    assert health.read_bytes() == before and (tools.sandbox.root / "inside_link.md").is_symlink()
    assert "inside_link.md (symlink: not followed)" in call(tools, "LS").text


def test_the_file_behind_a_hard_link_is_refused_even_when_it_changes_after_the_path_was_checked(world):
    _, outside, tools = world
    pkm = tools.sandbox.root
    (pkm / "Areas" / "plain.md").write_text("plain\n")
    path = tools.sandbox.resolve("Areas/plain.md")  # checked while it was a plain file
    (pkm / "Areas" / "plain.md").unlink()
    os.link(outside / "secret.md", pkm / "Areas" / "plain.md")
    with pytest.raises(SandboxError, match="hard links"):
        write_file(path, b"overwritten", "Areas/plain.md")
    with pytest.raises(SandboxError, match="hard links"):
        read_file(path, "Areas/plain.md")
    assert (outside / "secret.md").read_text() == "TOP SECRET\n"


def test_the_harness_readers_skip_links_to_a_file_that_would_count_as_filed(world):
    _, outside, tools = world
    pkm = tools.sandbox.root
    (outside / "filed.md").write_text(f"- the note <!-- fact_id: {FACT_ID} -->\n")
    (pkm / "Projects").mkdir()
    os.link(outside / "filed.md", pkm / "Projects" / "hard.md")
    (pkm / "Resources").mkdir()
    (pkm / "Resources" / "soft.md").symlink_to(outside / "filed.md")
    (pkm / "Archives").symlink_to(outside, target_is_directory=True)
    assert not tools.filed()
    assert not {"Projects/hard.md", "Resources/soft.md", "Areas/linked.md"} & set(snapshot(pkm))
    (pkm / "Projects" / "real.md").write_text(f"- the note <!-- fact_id: {FACT_ID} -->\n")
    assert tools.filed()  # a plain file with the marker counts


def test_the_reminders_skip_links_to_files_outside(world):
    _, outside, tools = world
    pkm = tools.sandbox.root
    (outside / "long.md").write_text("".join(f"line {n}\n" for n in range(2500)))
    os.link(outside / "long.md", pkm / "Areas" / "2026-05-25 hard.md")
    (pkm / "Areas" / "2026-05-26 soft.md").symlink_to(outside / "long.md")
    history = [{"edited": ["Areas/2026-05-25 hard.md", "Areas/2026-05-26 soft.md"]}] * 3
    assert reminders(pkm, history) == []
    (pkm / "Areas" / "2026-05-27 log.md").write_text("".join(f"line {n}\n" for n in range(2500)))
    text = "\n".join(reminders(pkm, history))  # a plain file of the same kind is reminded of
    assert "Areas/2026-05-27 log.md has 2500 lines" in text and "is named like a dated log" in text
    assert "hard.md" not in text and "soft.md" not in text


def test_the_edit_history_is_neither_read_nor_written_through_a_link(world):
    root, outside, _ = world
    history = outside / "history.json"
    history.write_text(json.dumps({"runs": [{"edited": ["Areas/health.md"]}]}))
    state_dir = root / "workspace" / ".pkm"
    state_dir.mkdir()
    (state_dir / "edit_history.json").symlink_to(history)
    assert load_history(state_dir) == []
    task = Task.model_validate({"id": "t", "input": {"content": "hi", "fact_id": FACT_ID},
                                "graders": [{"name": "pkm_completion"}]})
    record_history(state_dir, task, ["Areas/health.md"], [])
    assert json.loads(history.read_text()) == {"runs": [{"edited": ["Areas/health.md"]}]}
    (state_dir / "edit_history.json").unlink()
    os.link(history, state_dir / "edit_history.json")
    assert load_history(state_dir) == []
    record_history(state_dir, task, ["Areas/health.md"], [])
    assert json.loads(history.read_text()) == {"runs": [{"edited": ["Areas/health.md"]}]}
    (state_dir / "edit_history.json").unlink()  # a plain history file is read and written
    record_history(state_dir, task, ["Areas/new.md"], [])
    assert [run["edited"] for run in load_history(state_dir)] == [["Areas/new.md"]]


def test_grep_and_glob_over_the_whole_tree_never_show_what_a_link_points_at(world):
    _, _, tools = world
    grep = call(tools, "Grep", pattern="SECRET")
    assert not grep.is_error and "TOP SECRET" not in grep.text and grep.text == "no matches"
    glob = call(tools, "Glob", pattern="**/*.md")
    assert glob.text.split("\n") == ["Areas/health.md"]


def test_an_escape_attempt_leaves_the_agent_free_to_retry_inside(world):
    _, _, tools = world
    assert call(tools, "Write", path="../owned.md", content="x").is_error
    done = call(tools, "Write", path="Areas/owned.md", content="- fine <!-- fact_id: 2026/05/25.md#ts_1 -->\n")
    assert not done.is_error
    assert tools.events[-1]["op"] == "write" and tools.events[-1]["path"] == "Areas/owned.md"


def test_read_numbers_lines_and_pages_long_files(world):
    _, _, tools = world
    pkm = tools.sandbox.root
    (pkm / "long.md").write_text("".join(f"line {n}\n" for n in range(1, 2501)), encoding="utf-8")
    first = call(tools, "Read", path="long.md")
    lines = first.text.split("\n")
    assert lines[0] == "     1\tline 1" and lines[1999] == "  2000\tline 2000"
    assert "pass offset=2001" in lines[-1]
    rest = call(tools, "Read", path="long.md", offset=2001, limit=10)
    assert rest.text.split("\n")[0] == "  2001\tline 2001"


def test_edit_must_match_exactly_once(world):
    _, _, tools = world
    pkm = tools.sandbox.root
    (pkm / "twice.md").write_text("- a\n- a\n", encoding="utf-8")
    assert "not found" in call(tools, "Edit", path="twice.md", old_string="- b", new_string="x").text
    assert "occurs 2 times" in call(tools, "Edit", path="twice.md", old_string="- a", new_string="x").text
    assert not call(tools, "Edit", path="twice.md", old_string="- a", new_string="- c", replace_all=True).is_error
    assert (pkm / "twice.md").read_text() == "- c\n- c\n"


def test_moves_keep_the_origin_of_every_file(world):
    _, _, tools = world
    call(tools, "Read", path="Areas/health.md")
    assert not call(tools, "Move", src="Areas", dst="Archives/Areas 2025").is_error
    call(tools, "Edit", path="Archives/Areas 2025/health.md", old_string="# Health", new_string="# Health (closed)")
    edit = tools.events[-1]
    assert edit["op"] == "edit" and edit["origin"] == "Areas/health.md"
    assert json.loads(json.dumps(tools.events)) == tools.events  # JSON-ready for the store: a round trip keeps them
