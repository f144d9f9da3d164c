"""Filing a note in one call (`file_note`, agents/pkm/filing.py): the knowledge base listed up
front, an existing file shown before the first entry is added to it, a new file in the chosen
folder, paths outside the knowledge base refused; and, through the runner on a scripted model
graded by the real graders, a note filed in the right place, a skip, and the trivial note that
ends at once."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from prompt_optimizer_agents.pkm import filing
from prompt_optimizer_agents.pkm.sandbox import Sandbox
from prompt_optimizer_agents.pkm.tools import PKMTools
from optimizer.models import register_provider
from tests.conftest import PROJECT_ROOT
from tests.helpers import run_pkm_task as run_task
from tests.helpers import offered_names, tool_call_reply

FACT_ID = "2026/05/21.md#ts_2"
MARKER = f"<!-- fact_id: {FACT_ID} -->"
STARTER = PROJECT_ROOT / "fixtures" / "_starter_pkm" / "PKM"


@pytest.fixture
def tools(tmp_path):
    pkm = tmp_path / "workspace" / "PKM"
    shutil.copytree(STARTER, pkm)
    (tmp_path / "outside.md").write_text("outside\n", encoding="utf-8")
    return PKMTools(Sandbox(pkm), FACT_ID)


def call(tools: PKMTools, name: str, **arguments):
    return next(tool for tool in tools.tools() if tool.name == name).handler(arguments)


def test_the_listing_names_each_para_folder_and_its_files_with_their_first_line(tools, tmp_path):
    text = filing.listing(tools.sandbox.root, tools.folders(), "({count} more)")
    lines = text.splitlines()
    assert lines[:3] == ["Projects/", "  Kitchen Renovation.md: Kitchen Renovation", "Projects/Japan Trip/"]
    assert "Areas/Work/" in lines and "  one-on-ones.md: 1:1s with Dana" in lines
    assert lines.index("Areas/Work/") < lines.index("  one-on-ones.md: 1:1s with Dana")
    assert "fact_id" not in text and lines[-1].startswith("  ")

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert filing.listing(fresh, [], "({count} more)") == "Projects/\nAreas/\nResources/\nArchives/"


def test_the_files_sharing_most_words_with_the_note_are_named_first_in_latin_and_cjk_scripts(tmp_path):
    for path, text in {"Areas/Health/running.md": "# Running log\n- easy 5k run\n",
                       "Areas/日本語学習/文法ノート.md": "# 文法ノート\n- 〜わけではない: 部分否定\n",
                       "Resources/Recipes/curry.md": "# Chicken curry\n",
                       "Projects/Trip/budget.md": "# Budget\n"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    header = "Closest:"
    ran = filing.closest(tmp_path, "Tempo run today, 5k in 24:10. Running feels easy.", header).splitlines()
    assert ran[:2] == [header, "  Areas/Health/running.md: Running log"]
    grammar = filing.closest(tmp_path, "今日の授業で「わけではない」の文法を習った。", header).splitlines()
    assert grammar[1] == "  Areas/日本語学習/文法ノート.md: 文法ノート"
    assert len(ran) - 1 <= filing.CLOSEST
    assert filing.closest(tmp_path, "ok", header) == "", "nothing shared: no section at all"
    assert filing.closest(tmp_path / "missing", "Tempo run", header) == ""


def test_the_closest_file_is_found_in_a_knowledge_base_of_one_file_and_of_thousands(tmp_path):
    one = tmp_path / "one" / "Areas" / "Health"
    one.mkdir(parents=True)
    (one / "running.md").write_text("# Running log\n- easy 5k\n", encoding="utf-8")
    assert filing.closest(tmp_path / "one", "Running again today", "H") == "H\n  Areas/Health/running.md: Running log\n\n"

    big = tmp_path / "big"
    (big / "Archives").mkdir(parents=True)
    for number in range(filing.LISTED_FILES + 50):  # sorted before Resources/, past the listing's limit
        (big / "Archives" / f"old{number:03}.md").write_text(f"# Old note {number}\n", encoding="utf-8")
    (big / "Resources" / "Журнал").mkdir(parents=True)
    (big / "Resources" / "Журнал" / "пробежки.md").write_text("# Пробежки\n- лёгкая пробежка\n", encoding="utf-8")
    assert filing.closest(big, "Сегодня снова лёгкая пробежка", "H").splitlines()[1] == (
        "  Resources/Журнал/пробежки.md: Пробежки")


def test_a_large_knowledge_base_is_listed_up_to_a_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(filing, "LISTED_FILES", 3)
    for name in "abcde":
        (tmp_path / "Areas").mkdir(exist_ok=True)
        (tmp_path / "Areas" / f"{name}.md").write_text(f"# {name}\n", encoding="utf-8")
    text = filing.listing(tmp_path, ["Areas"], "({count} more files)")
    assert text.splitlines()[-1] == "(2 more files)" and "  c.md: c" in text and "d.md" not in text


def test_a_note_goes_into_an_existing_file_only_after_the_agent_was_shown_it(tools):
    path = tools.sandbox.root / "Areas" / "Work" / "one-on-ones.md"
    before = path.read_text(encoding="utf-8")
    arguments = {"folder": "Areas/Work", "file": "one-on-ones.md", "insight": "Settles the Leeds question.",
                 "entry": "- 2026-05-21 not doing the Leeds secondment, chartership first"}

    shown = call(tools, "file_note", **arguments)
    assert shown.again and not shown.is_error
    assert shown.text.startswith("Nothing is filed yet. This is the end of Areas/Work/one-on-ones.md")
    assert "1:1s with Dana" in shown.text, "a short file is shown whole"
    assert path.read_text(encoding="utf-8") == before and tools.insight is None

    filed = call(tools, "file_note", **arguments)
    assert filed.text == "filed in Areas/Work/one-on-ones.md, and the insight saved" and not filed.again
    after = path.read_text(encoding="utf-8")
    assert after.startswith(before.rstrip()) and after.endswith(f"chartership first {MARKER}\n")
    assert [event["op"] for event in tools.events] == ["read", "edit"], "read before the change"
    assert tools.filed() and tools.insight.text == "Settles the Leeds question."


def test_a_note_with_no_file_for_it_gets_a_new_file_in_the_chosen_folder(tools):
    answer = call(tools, "file_note", folder="Resources", file="Resources/Bike/bleeding-shimano-brakes",
                  entry="# Bleeding Shimano brakes\n\nMineral oil only.", insight="A how-to for the bike.")
    assert answer.text == "filed in Resources/Bike/bleeding-shimano-brakes.md, and the insight saved"
    created = tools.sandbox.root / "Resources" / "Bike" / "bleeding-shimano-brakes.md"
    assert created.read_text(encoding="utf-8") == f"# Bleeding Shimano brakes\n\nMineral oil only. {MARKER}\n"
    assert tools.events == [{"op": "write", "path": "Resources/Bike/bleeding-shimano-brakes.md",
                             "origin": "Resources/Bike/bleeding-shimano-brakes.md", "existed": False}]


@pytest.mark.parametrize("folder, file, reason", [
    ("..", "outside.md", "'..' may not leave PKM/"),
    ("Areas", "../../../outside.md", "'..' may not leave PKM/"),
    ("/tmp", "x.md", "absolute path '/tmp' refused"),
    ("Areas", "/etc/passwd.md", "absolute path '/etc/passwd.md' refused"),
    ("", "notes.md", "notes are filed in a folder under Projects, Areas, Resources, Archives"),
    ("Inbox", "notes.md", "notes are filed in a folder under Projects, Areas, Resources, Archives"),
    ("Areas", "notes.txt", "use a .md name"),
])
def test_a_target_outside_the_para_folders_is_refused_with_why(tools, tmp_path, folder, file, reason):
    answer = call(tools, "file_note", folder=folder, file=file, entry="x", insight="y")
    assert answer.is_error and reason in json.loads(answer.text)["error"][0]
    assert (tmp_path / "outside.md").read_text(encoding="utf-8") == "outside\n"
    assert tools.events == [] and not tools.filed() and tools.insight is None


@pytest.mark.parametrize("folder, file", [
    ("Areas/Work", "one-on-ones.md"), ("Areas/Work", "Areas/Work/one-on-ones.md"), ("Areas/Work", "Work/one-on-ones"),
    ("Areas", "Work/one-on-ones.md"), ("Areas/Work/", "one-on-ones"),
])
def test_a_file_named_with_its_folder_or_part_of_it_is_the_same_file(tools, folder, file):
    assert filing.target(tools.sandbox, folder, file) == tools.sandbox.root / "Areas" / "Work" / "one-on-ones.md"


def test_a_note_is_not_filed_twice_in_one_file(tools):
    call(tools, "file_note", folder="Areas/Health", file="new.md", entry="- one", insight="i")
    again = call(tools, "file_note", folder="Areas/Health", file="new.md", entry="- one", insight="i")
    assert again.is_error and "already filed in Areas/Health/new.md" in again.text


def test_entries_follow_the_file_list_items_or_paragraphs():
    assert filing.appended("# Log\n- a\n", "- b <!-- m -->") == "# Log\n- a\n- b <!-- m -->\n"
    assert filing.appended("# Notes\n\nSome prose.\n", "More prose.") == "# Notes\n\nSome prose.\n\nMore prose.\n"
    assert filing.with_marker("text\n", "<!-- m -->") == "text <!-- m -->"
    assert filing.with_marker("text <!-- m -->", "<!-- m -->") == "text <!-- m -->"


# ---------------------------------------------------------------- through the runner

CALLS: list[dict] = []


ONE_ON_ONE = {"folder": "Areas/Work", "file": "one-on-ones.md",
              "entry": "- 2026-05-21 told Dana: not doing the Leeds secondment",
              "insight": "Settles the Leeds secondment question Dana raised."}
"""The `file_note` call that files the one-to-one note where its task expects it."""


def _scripted(decide):
    """A model whose every call records in CALLS what it was offered, the note's message, the last
    message it was shown, the roles and the messages, then makes the call `decide(user, offered,
    messages)` names."""
    from litellm import CustomLLM

    class Scripted(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            user = next(message["content"] for message in messages if message["role"] == "user")
            offered = offered_names(kwargs)
            CALLS.append({"offered": offered, "user": user, "last": messages[-1]["content"],
                          "roles": [message["role"] for message in messages], "messages": list(messages)})
            name, arguments = decide(user, offered, messages)
            return tool_call_reply(model, f"call{len(CALLS)}", name, json.dumps(arguments))

    return Scripted()


def _filing(user: str, offered: set[str], messages: list[dict]) -> tuple[str, dict]:
    """`scripted_file/pkm` skips a note that says only "ok" and keeps any other, then files the
    brake-bleeding note in a new file under Resources/Bike, and any other note in
    Areas/Work/one-on-ones.md (making the same call again when shown the file), all with file_note."""
    if user.startswith("ok\n"):
        return "skip_pkm_organization", {"evidence": "only 'ok': nothing to keep"}
    if "keep_note" in offered:
        return "keep_note", {"topic": "a note to keep"}
    if "shimano" in user:
        return "file_note", {"folder": "Resources", "file": "Bike/bleeding-shimano-brakes.md",
                             "entry": "# Bleeding Shimano brakes\n\nMineral oil only.",
                             "insight": "A how-to for the bike's hydraulic brakes."}
    return "file_note", ONE_ON_ONE


register_provider("scripted_file", lambda: _scripted(_filing), ["scripted_file/pkm"])


def suite_task(task_id: str) -> dict:
    """A task of suites/pkm_agent as it is, without the LLM judges (their model is not the point)."""
    path = next((PROJECT_ROOT / "suites" / "pkm_agent" / "tasks").rglob(f"{task_id}.json"))
    task = json.loads(path.read_text(encoding="utf-8"))
    task["graders"] = [spec for spec in task["graders"] if spec["name"] not in
                       ("pkm_insight_quality", "pkm_append_coherence")]
    return task


def benchmark_filing():
    """How pkm_embedded.py (and transfer.py) name a trial's ending: graders/pkm.py's `filing`."""
    from prompt_optimizer_graders.pkm import TO_FILE, filing

    spec = importlib.util.spec_from_file_location("pkm_embedded", PROJECT_ROOT / "benchmarks" / "pkm_embedded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.filing is filing and module.TO_FILE == TO_FILE == ("right place", "filed elsewhere", "skipped", "not filed")
    return filing


def test_a_note_filed_with_file_note_passes_the_graders_in_the_right_place(tmp_path):
    CALLS.clear()
    trial = run_task(tmp_path, suite_task("pkm_route_one_on_one_secondment"), "scripted_file/pkm")
    assert trial.status == "passed", [(r.grader, r.rationale) for r in trial.grader_results]
    assert {result.grader for result in trial.grader_results} >= {
        "pkm_completion", "pkm_routed_correctly", "pkm_read_before_write", "pkm_no_overwrite"}
    assert benchmark_filing()(trial) == "right place"
    assert [call.name for call in trial.transcript.tool_calls] == ["keep_note", "file_note", "file_note"]
    assert "Nothing is filed yet" in trial.transcript.tool_calls[1].result, "shown first, then made again"
    # first the note alone, with the question whether to keep it (not even the knowledge base's
    # reminder, a catch-all Inbox here); once kept, the reminder, the knowledge base, the file the
    # note continues named first among the closest, and where to file it, last
    assert CALLS[0]["offered"] == {"keep_note", "skip_pkm_organization"}
    assert CALLS[0]["roles"] == ["system", "user"]
    assert CALLS[0]["last"].rstrip().endswith(
        "Call keep_note with its topic, or skip_pkm_organization if it should not be kept.")
    assert "one-on-ones.md" not in CALLS[0]["last"], "the knowledge base is not shown before the note is kept"
    shown = CALLS[1]["last"]
    assert "Areas/Work/\n" in shown and "  one-on-ones.md: 1:1s with Dana\n" in shown
    assert shown.index("Inbox") < shown.index("The knowledge base now"), "the reminder comes with the knowledge base"
    assert not any("System note" in str(m) for m in CALLS[2]["messages"][:-1] if m["role"] == "system"), \
        "a reminder told in keep_note's answer is not told again"
    assert trial.outcome.environment_state["reminders"], "the reminder shown is recorded"
    closest = shown.split("closest first:\n", 1)[1].splitlines()
    assert closest[0] == "  Areas/Work/one-on-ones.md: 1:1s with Dana"
    assert closest[-1].startswith("File the note with file_note now.")
    assert closest[-1].endswith("the closest one: folder Areas/Work, file one-on-ones.md."), "the closest file is named last"
    assert "skip_pkm_organization" not in CALLS[1]["offered"], "a kept note is filed"


def test_a_note_with_no_file_for_it_filed_in_a_new_file_of_the_right_folder_passes(tmp_path):
    trial = run_task(tmp_path, suite_task("pkm_create_bike_brake_bleed"), "scripted_file/pkm")
    assert trial.status == "passed", [(r.grader, r.rationale) for r in trial.grader_results]
    assert benchmark_filing()(trial) == "right place"
    assert [call.name for call in trial.transcript.tool_calls] == ["keep_note", "file_note"], "one call files it"


def test_the_trivial_note_is_skipped_at_once_and_passes(tmp_path):
    CALLS.clear()
    trial = run_task(tmp_path, suite_task("pkm_skip_trivial_ok"), "scripted_file/pkm")
    assert trial.status == "passed", trial.error
    assert [call.name for call in trial.transcript.tool_calls] == ["skip_pkm_organization"]
    assert CALLS[0]["offered"] == {"keep_note", "skip_pkm_organization"}, "keeping and skipping offered first"
    assert benchmark_filing()(trial) == "rightly skipped", "graded as a skip, not counted among the filings"
    assert len(CALLS) == 2 and CALLS[1]["roles"] == ["system", "user"], "the skip was asked about once more, afresh"


def _skipping(again: str):
    """A model's choices (for `_scripted`): it skips the note at its first question; asked again (a
    fresh conversation whose message names the closest files), it calls `again`; once the note is
    kept, it files it in Areas/Work/one-on-ones.md."""
    def decide(user: str, offered: set[str], messages: list[dict]) -> tuple[str, dict]:
        if len(messages) == 2 and "Files of the knowledge base closest to this note:" in user:
            return again, ({"topic": "the secondment"} if again == "keep_note" else {"evidence": "no"})
        if len(messages) == 2:
            return "skip_pkm_organization", {"evidence": "a test message"}
        return "file_note", ONE_ON_ONE
    return decide


register_provider("scripted_again", lambda: _scripted(_skipping("keep_note")), ["scripted_again/keeps"])
register_provider("scripted_skip", lambda: _scripted(_skipping("skip_pkm_organization")), ["scripted_skip/skips"])


def test_a_note_skipped_at_first_but_kept_when_asked_again_with_its_closest_files_is_filed(tmp_path):
    CALLS.clear()
    trial = run_task(tmp_path, suite_task("pkm_route_one_on_one_secondment"), "scripted_again/keeps")
    assert trial.status == "passed", [(r.grader, r.rationale) for r in trial.grader_results]
    calls = trial.transcript.tool_calls
    assert [call.name for call in calls] == ["skip_pkm_organization", "file_note", "file_note"]
    assert calls[0].result.startswith("Asked again with the files closest to it, the note is to be kept")
    assert "Areas/Work/one-on-ones.md: 1:1s with Dana" in calls[0].result, "then keep_note's answer"
    asked = CALLS[1]["messages"][-1]["content"]
    assert "Files of the knowledge base closest to this note:\n  Areas/Work/one-on-ones.md" in asked
    assert trial.outcome.environment_state["skip_evidence"] is None


def test_a_note_skipped_at_both_readings_is_skipped(tmp_path):
    CALLS.clear()
    trial = run_task(tmp_path, suite_task("pkm_route_one_on_one_secondment"), "scripted_skip/skips")
    assert [call.name for call in trial.transcript.tool_calls] == ["skip_pkm_organization"]
    assert trial.outcome.environment_state["skip_evidence"] == "a test message"
    assert len(CALLS) == 2, "asked once more, then skipped"
    assert benchmark_filing()(trial) == "skipped"


def test_mock_oracle_makes_a_file_note_call_again_when_shown_the_file_first(tmp_path):
    """A reference solution that files with `file_note` into an existing file replays as the
    agent needs it: the first call shows the file and asks for the call again, which is made."""
    task = suite_task("pkm_route_one_on_one_secondment")
    task["reference_solution"]["tool_calls"] = [{"name": "file_note", "arguments": dict(ONE_ON_ONE)}]
    trial = run_task(tmp_path, task, "mock/oracle")
    assert trial.status == "passed", [(r.grader, r.rationale) for r in trial.grader_results]
    calls = trial.transcript.tool_calls
    assert [call.name for call in calls] == ["keep_note", "file_note", "file_note"], "kept first, as the agent asks"
    assert calls[1].result.startswith("Nothing is filed yet") and calls[2].result.startswith("filed in")
