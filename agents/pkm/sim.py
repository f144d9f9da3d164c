"""How `mock/sim` plays the PKM Agent.

Rule vocabulary (one rule per failure bucket; a rule is *stated* when one sentence of the system
prompt matches every concept, case-insensitively; see `optimizer.trials.sim` for negation):

| bucket | concepts that must share a sentence | a general rule that states it |
|---|---|---|
| route_into_existing_file | existing file/note; append / add to / extend; instead of / rather than / new file | "When an existing file already covers the note's topic, append to it instead of creating a new file." |
| route_into_existing_subfile | subfolder / nested / project folder; look / search / explore / LS / Glob; specific / closest | "Look inside subfolders and project folders for the most specific file before filing higher up." |
| create_in_right_bucket | Projects; Areas; Resources; create / new file | "When no file fits, create a new file where it belongs: Projects for goals with an end, Areas for ongoing responsibilities, Resources for reference." |
| skip_trivial | trivial / greeting / emoji / test message / filler; skip | "Skip trivial input such as greetings, emoji or test messages." |
| skip_user_declined | user says / asks / declines / not to keep; skip / respect | "When the user asks not to keep a note, respect that and skip it." |
| read_before_write | read; before; edit / write / change | "Read a file before you edit it." |
| no_overwrite | keep / preserve / never delete; existing / old / earlier entry; correction / update / contradicts | "When a note corrects an earlier entry, add the correction next to it and keep the old entry." |
| consolidate_fragmented | fragmented / scattered / many small files; merge / consolidate / combine | "When a folder is fragmented into many small files, merge them into one file, keeping every marker." |
| cross_ref_paper_to_thesis | paper / source; cross-reference / link / cite; project / thesis / chapter | "File a paper note with the paper and add a cross-reference in the thesis chapter or project that uses it." |
| novelist_story_notes | character; plot; world | "Story notes go to the matching character, plot or world file of the novel." |
| bilingual_routing | language; topic / subject / meaning; route / file / folder | "Route a note by its topic whatever language it is written in, and match folder names in any language." |
| fresh_workspace | empty / fresh / no files; PARA / Projects / Areas; create / set up | "When the knowledge base is empty, create the PARA folder the note belongs in and a topic file inside it." |
| archive_finished_project | finished / complete / done; project; archive | "When a note says a project is finished, move its folder to Archives and add the closing note there." |

What a failing PKM Agent does, by bucket: routing buckets file the note into a dated catch-all
file outside the expected folders; `read_before_write` edits without reading; `no_overwrite`
replaces the old entry instead of adding to it; `consolidate_fragmented` adds one more small
file; `archive_finished_project` edits the project where it is instead of archiving it; skip
buckets file the input anyway; `fresh_workspace` writes a loose file at the PKM/ root.

`sim_rules.json` next to this file holds, per bucket, a rule the sim scores as stated and a
sentence it scores as contradicting the rule, plus distractors that touch no bucket: what
stand-in patchers write (see `optimizer.trials.sim.RuleTexts`; tests check that they score so).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from optimizer import Rule, SimProfile, Task, ToolCallSpec, load_rule_texts

MARKER = re.compile(r"<!--\s*fact_id:\s*fact_pkm_[^\s>]*\s*-->")

RULES = {
    "route_into_existing_file": Rule((r"existing (file|note)", r"append|add (it )?to|extend",
                                      r"instead of|rather than|new file")),
    "route_into_existing_subfile": Rule((r"sub-?folder|nested|project folder", r"\blook|search|explore|\bLS\b|glob",
                                         r"specific|closest")),
    "create_in_right_bucket": Rule((r"\bprojects\b", r"\bareas\b", r"\bresources\b", r"\bcreate|new file")),
    "skip_trivial": Rule((r"trivial|greeting|emoji|test message|filler", r"\bskip")),
    "skip_user_declined": Rule((r"user (says|asks|declines)|asks not to|not to (keep|save|file)", r"\bskip|respect")),
    "read_before_write": Rule((r"\bread\b", r"\bbefore\b", r"\bedit|\bwrite|\bchange")),
    "no_overwrite": Rule((r"\bkeep|preserve|never delete", r"(existing|old|earlier|previous) entr",
                          r"correct|update|contradict")),
    "consolidate_fragmented": Rule((r"fragment|scattered|many small files", r"merge|consolidat|combine")),
    "cross_ref_paper_to_thesis": Rule((r"\bpaper|\bsource", r"cross-?ref|\blink|\bcite", r"project|thesis|chapter")),
    "novelist_story_notes": Rule((r"\bcharacter", r"\bplot", r"\bworld")),
    "bilingual_routing": Rule((r"\blanguage", r"\btopic|subject|meaning", r"\broute|\bfile|folder")),
    "fresh_workspace": Rule((r"\bempty|\bfresh|no files", r"\bPARA\b|\bprojects\b|\bareas\b", r"\bcreate|set up")),
    "archive_finished_project": Rule((r"finished|complete|\bdone\b", r"\bproject", r"\barchive")),
}

BASE_RATES = {
    "route_into_existing_file": 0.55, "route_into_existing_subfile": 0.45, "create_in_right_bucket": 0.5,
    "skip_trivial": 0.5, "skip_user_declined": 0.4, "read_before_write": 0.5, "no_overwrite": 0.45,
    "consolidate_fragmented": 0.35, "cross_ref_paper_to_thesis": 0.4, "novelist_story_notes": 0.55,
    "bilingual_routing": 0.45, "fresh_workspace": 0.5, "archive_finished_project": 0.35,
}

READS = ("Read", "BatchRead")
INSIGHT = "update_timeline_card_insight"


def _config(task: Task, name: str) -> dict[str, Any]:
    return next((spec.config for spec in task.graders if spec.name == name), {})


def _catch_all_file(task: Task) -> str:
    expected = _config(task, "pkm_routed_correctly").get("expected_buckets") or []
    day = task.input.resolved_published_at().date().isoformat()
    for folder in ("Resources/Notes", "Archives/Unsorted", "Areas/Misc"):
        if not any(folder.startswith(bucket.strip("/")) or bucket.strip("/").startswith(folder)
                   for bucket in expected):
            return f"{folder}/{day}.md"
    return f"Unsorted/{day}.md"


def misfile(task: Task, reference: list[ToolCallSpec]) -> list[ToolCallSpec]:
    """File the note into a dated catch-all file, then set the insight as the reference does."""
    fact_id = task.input.resolved_fact_id()
    content = f"# Notes\n\n- {task.input.content.strip() or '(empty)'} <!-- fact_id: {fact_id} -->\n"
    calls = [ToolCallSpec(name="Write", arguments={"path": _catch_all_file(task), "content": content})]
    insight = [call for call in reference if call.name == INSIGHT]
    return calls + (insight or [ToolCallSpec(name=INSIGHT, arguments={
        "fact_id": fact_id, "insight_text": f"Saved: {task.input.content.strip()[:80] or 'an empty note'}."})])


def _without_seed_lines(text: str) -> str:
    return "\n".join(line for line in text.split("\n") if not MARKER.search(line))


def failing_calls(task: Task, rng: random.Random) -> list[ToolCallSpec]:
    reference = task.reference_calls()
    bucket = task.bucket
    if bucket == "read_before_write":
        return [call for call in reference if call.name not in READS]
    if bucket == "no_overwrite":
        return [ToolCallSpec(name=call.name, arguments={**call.arguments,
                                                        "new_string": _without_seed_lines(call.arguments["new_string"])})
                if call.name == "Edit" else call for call in reference]
    if bucket == "archive_finished_project":
        moves = {call.arguments["dst"].rstrip("/"): call.arguments["src"].rstrip("/")
                 for call in reference if call.name == "Move"}
        calls = []
        for call in reference:
            if call.name == "Move":
                continue
            arguments = dict(call.arguments)
            for dst, src in moves.items():
                if str(arguments.get("path", "")).startswith(dst + "/"):
                    arguments["path"] = src + arguments["path"][len(dst):]
            calls.append(ToolCallSpec(name=call.name, arguments=arguments))
        return calls
    if bucket == "fresh_workspace":
        fact_id = task.input.resolved_fact_id()
        return [ToolCallSpec(name="Write", arguments={
            "path": "notes.md", "content": f"- {task.input.content.strip()} <!-- fact_id: {fact_id} -->\n"})] + \
            [call for call in reference if call.name == INSIGHT]
    if bucket == "consolidate_fragmented":
        fact_id = task.input.resolved_fact_id()
        buckets = _config(task, "pkm_routed_correctly").get("expected_buckets") or ["Resources"]
        slug = f"note-{rng.randrange(1000, 9999)}"
        return [ToolCallSpec(name="Write", arguments={
            "path": f"{buckets[0].strip('/')}/{slug}.md",
            "content": f"# {task.input.content.strip()[:60]}\n\n{task.input.content.strip()} "
                       f"<!-- fact_id: {fact_id} -->\n"})] + [call for call in reference if call.name == INSIGHT]
    return misfile(task, reference)


PROFILE = SimProfile(rules=RULES, base_rates=BASE_RATES, failing_calls=failing_calls,
                     rule_texts=load_rule_texts(Path(__file__).with_name("sim_rules.json")))
