"""The tool loop's harness for small models (optimizer/trials/tool_loop.py), through the real runner on a
scripted model: the turn budget announced as it runs down, the wrap-up phase that offers only the
finishing tools, what a finishing tool says when the job is not done yet, and tools withheld while
they cannot help."""

from __future__ import annotations

import json

from optimizer.models import register_provider
from tests.conftest import PROJECT_ROOT
from tests.helpers import run_pkm_task as run_task
from tests.helpers import offered_names, sent_tools, text_reply, tool_call_reply

FACT_ID = "2026/05/25.md#ts_1"
SEEN: list[dict] = []
"""What the scripted model was offered on each call: tool names, and the messages it saw."""


def harness_task(task_id: str, content: str, fixture: str, **metadata: str) -> dict:
    """A PKM task of the bucket `harness` on `fixture`, graded by the completion grader alone."""
    return {"id": task_id, "metadata": {"failure_bucket": "harness", **metadata},
            "input": {"content": content, "base_fixture": fixture,
                      "fact_id": FACT_ID, "published_at": "2026-05-25T08:00:00"},
            "graders": [{"name": "pkm_completion"}]}


def _scripted_model():
    """`scripted/pkm` keeps the note, looks around with a different Glob each turn until the loop
    offers only the finishing tools, then files the note with `file_note` but leaves the insight empty, then saves
    the insight."""
    from litellm import CustomLLM

    class Scripted(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            offered = offered_names(kwargs)
            SEEN.append({"offered": offered, "messages": [dict(m) for m in messages]})
            if "keep_note" in offered:
                name, arguments = "keep_note", {"topic": "a tempo run"}
            elif offered == {"update_timeline_card_insight"}:
                name, arguments = "update_timeline_card_insight", {"fact_id": FACT_ID,
                                                                   "insight_text": "The user ran a tempo 5k."}
            elif "Glob" not in offered:
                name, arguments = "file_note", {"folder": "Areas", "file": "Health/running.md",
                                                "entry": "- Tempo 5k in 24:10", "insight": ""}
            else:
                name, arguments = "Glob", {"pattern": f"**/*{len(SEEN)}*.md"}
            return tool_call_reply(model, f"call{len(SEEN)}", name, json.dumps(arguments))

    return Scripted()


def test_the_budget_is_announced_and_the_last_turns_offer_only_the_finishing_tools(tmp_path):
    SEEN.clear()
    task = harness_task("pkm_harness", "Tempo 5k in 24:10 today.", "fresh", max_turns="10")
    trial = run_task(tmp_path, task, "scripted/pkm")
    assert trial.status == "passed", trial.error

    every_tool = {"file_note", "Read", "BatchRead", "Write", "Edit", "Move", "Remove", "LS", "Glob", "Grep",
                  "update_timeline_card_insight", "keep_note", "skip_pkm_organization"}
    # 10 turns, wrap-up in the last 3. Call 1 is offered only keeping or skipping the note; calls
    # 2-7 (kept) every filing tool but the insight (nothing is written yet; file_note takes the
    # insight itself); call 8 (the wrap-up) only what files the note in one call; call 9 (filed,
    # insight empty) only the insight, which ends it
    looking = every_tool - {"update_timeline_card_insight", "keep_note", "skip_pkm_organization"}
    assert [seen["offered"] for seen in SEEN] == [{"keep_note", "skip_pkm_organization"}] + [looking] * 6 + [
        {"file_note"}, {"update_timeline_card_insight"}]

    def system_notes(call: int) -> list[str]:
        return [m["content"] for m in SEEN[call - 1]["messages"][2:] if m["role"] == "system"]

    assert system_notes(4) == []
    assert system_notes(5) == ["Turns left: 6 of 10. Finish this note before they run out."]
    assert system_notes(7)[-1] == "Turns left: 4 of 10. Finish this note before they run out."
    wrap_up = ("Only 3 turns are left, so only the tools that finish the job are offered now: "
               "file_note. Use them to complete this note.")
    assert system_notes(8)[-1] == wrap_up
    assert system_notes(9)[-2:] == [wrap_up, "Turns left: 2 of 10. Finish this note before they run out."]

    # a note filed without its insight says what is still missing, and names no marker to echo
    filed = trial.transcript.tool_calls[-2]
    assert filed.name == "file_note" and not filed.is_error
    assert filed.result == ("filed in Areas/Health/running.md; the insight was empty\n"
                            "This note is not finished yet:\n- the timeline card insight was not updated")
    assert trial.transcript.tool_calls[-1].result == "insight saved on the timeline card"


LOOKED: list[dict] = []


def _looking_model():
    """`scripted_look/pkm` records the tools it is offered each turn: it keeps the note, then
    files it in a new file of Areas."""
    from litellm import CustomLLM

    class Looking(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            LOOKED.append({tool["function"]["name"]: tool["function"]["parameters"] for tool in sent_tools(kwargs)})
            if "keep_note" in LOOKED[-1]:
                return tool_call_reply(model, "keep", "keep_note", json.dumps({"topic": "a greeting"}))
            return tool_call_reply(model, "file", "file_note", json.dumps(
                {"folder": "Areas", "file": "hello.md", "entry": "hello", "insight": "A greeting."}))

    return Looking()


register_provider("scripted", _scripted_model, ["scripted/pkm"])
register_provider("scripted_look", _looking_model, ["scripted_look/pkm"])


def test_paths_are_narrowed_to_the_ones_that_exist(tmp_path):
    LOOKED.clear()
    task = harness_task("pkm_look", "hello", "_starter_pkm")
    trial = run_task(tmp_path, task, "scripted_look/pkm")
    assert trial.status != "errored", trial.error

    assert set(LOOKED[0]) == {"keep_note", "skip_pkm_organization"}, "first: keep the note or skip it"
    fixture = PROJECT_ROOT / "fixtures" / "_starter_pkm" / "PKM"
    files = sorted(path.relative_to(fixture).as_posix() for path in fixture.rglob("*.md"))
    folders = sorted({path.relative_to(fixture).as_posix() for path in fixture.rglob("*") if path.is_dir()})
    offered = LOOKED[1]
    assert offered["Read"] == {"type": "object", "properties": {"path": {"enum": files}}, "required": ["path"]}
    assert offered["BatchRead"]["properties"]["paths"]["items"] == {"enum": files}
    assert offered["Edit"]["properties"]["path"] == {"enum": files}
    assert set(offered["Edit"]["required"]) == {"path", "old_string", "new_string"}
    assert offered["LS"]["properties"]["path"]["enum"] == ["", *folders]
    assert "enum" not in json.dumps(offered["Write"]), "a new file may have any name"
    roots = ["Projects", "Areas", "Resources", "Archives"]
    para = sorted(folders, key=lambda folder: (roots.index(folder.split("/")[0]), folder))
    assert offered["file_note"]["properties"]["folder"] == {"enum": para}, "a folder of the list, PARA first"
    assert "enum" not in json.dumps(offered["file_note"]["properties"]["file"]), "a new file may have any name"
    assert "update_timeline_card_insight" not in offered, "no insight before anything is written"


CUT: list[list[dict]] = []


def _cut_model():
    """`scripted_cut/pkm` keeps the note, then writes a file_note call whose insight loops until the reply stops at its
    length limit (as the embedded model's server returns it: plain content, finish reason
    "length"), then, told so, makes the call complete."""
    from litellm import CustomLLM

    call = {"folder": "Areas", "file": "Health/running.md", "entry": "- Tempo 5k in 24:10",
            "insight": "A faster 5k."}

    class Cut(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            CUT.append([dict(m) for m in messages])
            if len(CUT) == 1:
                return tool_call_reply(model, "keep", "keep_note", json.dumps({"topic": "a tempo run"}))
            if len(CUT) == 2:
                looping = json.dumps({"name": "file_note", "arguments": call})[:-20] + " faster" * 200
                return text_reply(model, looping, "length", completion_tokens=512)
            return tool_call_reply(model, f"cut{len(CUT)}", "file_note", json.dumps(call))

    return Cut()


register_provider("scripted_cut", _cut_model, ["scripted_cut/pkm"])


def test_a_reply_cut_off_at_its_length_limit_is_told_so_not_reminded_of_skipping(tmp_path):
    CUT.clear()
    task = harness_task("pkm_cut", "Tempo 5k in 24:10 today.", "fresh")
    trial = run_task(tmp_path, task, "scripted_cut/pkm")
    assert trial.status == "passed", trial.error
    said, cut = CUT[2][-1], CUT[2][-2]
    assert said["role"] == "user" and said["content"].startswith("Your last reply stopped at the length limit")
    assert cut["role"] == "assistant" and len(cut["content"]) == 200 and " faster" * 20 not in cut["content"], \
        "the loop the reply ran into is not shown to the model again"
    assert "skip_pkm_organization" not in said["content"]
    assert [call.name for call in trial.transcript.tool_calls] == ["keep_note", "file_note"]


CHATTY: list[list[dict]] = []


def _chatty_model():
    """`scripted_chat/pkm` answers each turn first in prose (no call), then, reminded, makes the
    call the turn offers: keep_note, then file_note."""
    from litellm import CustomLLM

    class Chatty(CustomLLM):
        def completion(self, model, messages, *args, **kwargs):
            CHATTY.append([dict(m) for m in messages])
            offered = offered_names(kwargs)
            if "not finished" not in str(messages[-1]["content"]):
                return text_reply(model, "Noted.")
            if "keep_note" in offered:
                return tool_call_reply(model, "keep", "keep_note", json.dumps({"topic": "a tempo run"}))
            return tool_call_reply(model, "file", "file_note", json.dumps(
                {"folder": "Areas", "file": "running.md", "entry": "- Tempo 5k", "insight": "A faster 5k."}))

    return Chatty()


register_provider("scripted_chat", _chatty_model, ["scripted_chat/pkm"])


def test_a_reminder_names_only_the_tools_the_agent_is_offered_then(tmp_path):
    CHATTY.clear()
    task = harness_task("pkm_chat", "Tempo 5k in 24:10 today.", "fresh")
    trial = run_task(tmp_path, task, "scripted_chat/pkm")
    assert trial.status == "passed", trial.error
    reminders = [m["content"] for call in CHATTY for m in call[-1:] if m["role"] == "user" and "not finished" in m["content"]]
    assert len(reminders) == 2
    assert "call keep_note with its topic, or skip_pkm_organization" in reminders[0] and "file_note" not in reminders[0]
    assert "call file_note with the folder and file" in reminders[1]
    assert "skip_pkm_organization" not in reminders[1], "a kept note is not told to skip: that tool is gone"
    assert [call.name for call in trial.transcript.tool_calls] == ["keep_note", "file_note"]
