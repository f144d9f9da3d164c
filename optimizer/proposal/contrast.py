"""The contrast request: a patch request a small patcher model can follow.

Today's request (`request.md.j2`) gives a patcher everything: whole traces, workspaces, every
grader's verdict, the manual. A 1.5B model answers it with rules about the wrong bucket. This
one cuts the target's failures into short contrastive cases (the input, what the agent did, what
was expected, the grader's words), shows the confusions the graders name
(`optimizer.proposal.targets`) and asks for one rule in a fixed form ("When <kind of input>, <what to
do> instead of <the mistake>"). Its text is `prompt_manual/patcher_contrast/`; the answer is a
`rule` answer (`patch_format = "contrast"`), so it is checked, linted and gated as any rule.
Many samples of it are screened by the search like any candidates.

From gepa's reflective mutation it takes the per-example triple (inputs, generated outputs,
feedback) as the unit a patcher reads; from DSPy's instruction proposers, one instruction per
sample, drawn at a sampling temperature so the samples differ. Not taken: GroundedProposer's
dataset and program summaries (extra model calls a small model answers poorly).

The guided form: asked for the whole rule, the 1.5B patcher often turned "Did: routine /
Expected: quote" into a rule pointing the wrong way. When the one target's most frequent
confusion is named by a grader `guided.yaml` has an action for, the request ends with the rule
already written in the right direction (from the confusion's data) and a blank for the kind of
input; the `llm` proposer then asks only for that kind (`kind_problem` says what it must be).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jinja2
import yaml

from optimizer.proposal.manual import shipped_manual
from optimizer.proposal.targets import CONFUSION, Confusion

FOLDER = shipped_manual() / "patcher_contrast"
MAX_PIECES = 6
"""Cases shown; a small model's attention is the limit, not its context."""
INPUT_CHARS = 240
WORDS_CHARS = 200
MAX_KIND_WORDS = 15
"""The longest kind of input the guided form takes: a phrase, not a description of the cases."""
NUMBER = re.compile(r"\d")
LINK = re.compile(r"://|\bwww\.|\.(com|org|net|io)\b", re.IGNORECASE)
QUOTED = re.compile(r"[\"`\u201c\u201d\u2018]|(^|\s)'|'(\s|$)")
"""Quotation marks; an apostrophe inside a word (someone's) is not one."""
IDENTIFIER = re.compile(r"\w_\w")
"""A word that is a name from the request or the code (`template_patch`, `fact_id`)."""


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def piece(record: dict[str, Any], about: Confusion | None = None) -> dict[str, str] | None:
    """One failure record (`optimizer.proposal.request.failure_records`) as a contrastive case: its
    failed grader that names the confusion the request is `about`, else its first that names one,
    else its first failed grader, else how it ended."""
    failed = [g for g in record["graders"] if not g.get("passed") and not g.get("errored")]
    named = [g for g in failed if _confusion_of(g) is not None]
    named.sort(key=lambda g: about is None or _confusion_of(g) != about)
    chosen = (named or failed or [None])[0]
    if chosen is None:
        if not record.get("ending"):
            return None
        did, expected, words = record["ending"], "a finished answer", record["ending"]
    else:
        confusion = (chosen.get("details") or {}).get("confusion") or {}
        words = f"{chosen.get('grader', '')}: {chosen.get('rationale', '')}"
        did = str(confusion.get("got", "see the grader"))
        expected = str(confusion.get("expected", f"what {chosen.get('grader', 'the grader')} checks"))
    return {"input": _cut(record["input"], INPUT_CHARS), "did": _cut(did, WORDS_CHARS),
            "expected": _cut(expected, WORDS_CHARS), "words": _cut(words, WORDS_CHARS),
            "suite": record["suite"], "bucket": record["bucket"]}


def pieces(failures: list[dict[str, Any]], limit: int = MAX_PIECES,
           about: Confusion | None = None) -> list[dict[str, str]]:
    """The first `limit` cases of the failures, in their order (most informative first), named
    confusions first, each showing the confusion the request is `about` where its graders name it."""
    cases = [case for case in (piece(record, about) for record in failures) if case]
    named = [case for case in cases if not case["did"].startswith("see the grader")]
    return (named + [case for case in cases if case not in named])[:limit]


def same_decision(records: list[dict[str, Any]], selection) -> list[dict[str, Any]]:
    """The cases of a decision-scoped rule (`patch_format = "decision"`): of every bucket's failure
    records, those whose failed grader names the one target's most frequent confusion (the agent
    chose the same wrong way, whatever the bucket), taken in turn from each bucket, the target's
    first, so the few cases shown span the buckets and the patcher names the decision rather than
    one bucket's notes. The target's own records when it has no named confusion (or there are
    several targets)."""
    targeted = {(t.suite, t.bucket) for t in selection.targets}
    own = [record for record in records if (record["suite"], record["bucket"]) in targeted]
    confusion = top_confusion(selection, own)
    if confusion is None:
        return own
    by_bucket: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in own + [r for r in records if (r["suite"], r["bucket"]) not in targeted]:
        if confusion in _named(record):
            by_bucket.setdefault((record["suite"], record["bucket"]), []).append(record)
    rows = list(by_bucket.values())
    return [row[depth] for depth in range(max(map(len, rows), default=0)) for row in rows if depth < len(row)]


def _named(record: dict[str, Any]) -> list[Confusion]:
    """The confusions the failed graders of one failure record name."""
    return [found for result in record["graders"] if not result.get("passed")
            for found in [_confusion_of(result)] if found is not None]


def _confusion_of(result: dict[str, Any]) -> Confusion | None:
    """The confusion one grader result names, if any."""
    named = (result.get("details") or {}).get(CONFUSION)
    if not isinstance(named, dict):
        return None
    return Confusion(str(result.get("grader")), str(named.get("got")), str(named.get("expected")))


def instructions() -> str:
    return (FOLDER / "instructions.md").read_text(encoding="utf-8")


def render_contrast(*, selection, failures: list[dict[str, Any]], prompt: str,
                    rejected_ideas: list[str] | None = None) -> str:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(FOLDER), autoescape=False,
                                     keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    about = top_confusion(selection, failures)
    rule = guided_rule(about)
    shown = pieces(failures, about=about)
    targeted = {(t.suite, t.bucket) for t in selection.targets}
    buckets = sorted({case["bucket"] for case in shown if (case["suite"], case["bucket"]) not in targeted})
    return environment.get_template("request.md.j2").render(
        agent=selection.agent, targets=selection.targets, pieces=shown,
        rejected_ideas=rejected_ideas or [], prompt=prompt.rstrip("\n"), kind_words=MAX_KIND_WORDS,
        guided={"label": guided_text()["label"], "rule": rule} if rule else None, other_buckets=buckets)


@functools.cache
def guided_text() -> dict[str, Any]:
    return yaml.safe_load((FOLDER / "guided.yaml").read_text(encoding="utf-8"))


def top_confusion(selection, failures: list[dict[str, Any]]) -> Confusion | None:
    """The most frequent confusion of the selection's one target, as the failures' graders name
    it; None with several targets (one rule cannot move each) or none named."""
    if len(selection.targets) != 1 or not selection.targets[0].confusions:
        return None
    wanted = selection.targets[0].confusions[0][0]
    return next((confusion for record in failures for confusion in _named(record) if confusion.text() == wanted), None)


def action(confusion: Confusion) -> str | None:
    """What the agent should do instead, in the words of `guided.yaml`; None when it has none."""
    text = guided_text()
    entry = text["actions"].get(confusion.grader)
    if isinstance(entry, dict):
        entry = entry.get(confusion.expected)
    if not entry or confusion.got in text["unnamed"]:
        return None

    def shown(value: str) -> str:
        return " or ".join(text["value"].format(name=name) for name in value.split(" or "))

    return entry.format(expected=shown(confusion.expected), got=shown(confusion.got))


def guided_rule(confusion: Confusion | None) -> str | None:
    """The rule the guided request asks the patcher to complete (its kind of input blank) about the
    target's most frequent `confusion` (`top_confusion`), or None for the free form."""
    done = action(confusion) if confusion else None
    return guided_text()["rule"].format(kind=guided_text()["blank"], action=done) if done else None


def rule_to_complete(request: str) -> str | None:
    """The rule a guided request ends with, blank included, or None (a free request)."""
    text = guided_text()
    found = re.findall(rf"^{re.escape(text['label'])} (.+)$", request, re.MULTILINE)
    return found[-1].strip() if found and text["blank"] in found[-1] else None


def kind_of(answer: str, rule: str) -> str:
    """The patcher's kind of input on one line, without the parts of the rule it may have
    repeated around it ("When ...", ", choose ... instead of ....") or a final stop."""
    before, _, after = rule.partition(guided_text()["blank"])
    head, tail = before.strip(), after.strip(" .")
    kind = " ".join(answer.split()).rstrip(" .")
    if head and kind.lower().startswith(head.lower() + " "):
        kind = kind[len(head) + 1:]
    if tail and kind.lower().endswith(tail.lower()):
        kind = kind[: -len(tail)]
    return kind.strip(" .,;:")


def complete(rule: str, kind: str) -> str:
    return rule.replace(guided_text()["blank"], kind, 1)


def kind_problem(answer: str, kind: str, rule: str = "") -> str | None:
    """Why a kind cannot complete the rule (the patcher is told once), or None."""
    problems = guided_text()["problems"]
    words, lines = len(kind.split()), len([line for line in answer.splitlines() if line.strip()])
    if words > MAX_KIND_WORDS or lines > 1:
        return problems["long"].format(words=words, lines=lines, limit=MAX_KIND_WORDS)
    for name, pattern in (("links", LINK), ("numbers", NUMBER), ("quotes", QUOTED)):
        if pattern.search(kind):
            return problems[name]
    if names_only(kind, rule):
        return problems["names_only"]
    if identifier_only(kind):
        return problems["identifiers"]
    return None


def names_only(kind: str, rule: str) -> bool:
    """True when the kind says nothing of the input: only the choices the rule already names
    ("quote or snippet", "the event template") and filler words."""
    named = {name.lower() for name in re.findall(r"`([^`]+)`", rule)}
    words, telling = _words(kind)
    return bool(named and words) and all(word in named for word in telling)


def identifier_only(kind: str) -> bool:
    """True when the kind is a name from the request or the code and filler words ("template_patch",
    "the template_quote notes"): measured on the embedded model, "When template_patch, choose the
    `quote` or `snippet` template instead of `event`" lifted its bucket and made quote cards of the
    trivial notes. A name beside words for the input ("notes whose fact_id repeats") is kept."""
    telling = _words(kind)[1]
    return bool(telling) and all(IDENTIFIER.search(word) for word in telling)


def _words(kind: str) -> tuple[list[str], list[str]]:
    """The kind's words, lower-cased, and those of them that are not `filler` in `guided.yaml`."""
    filler = {word.lower() for word in guided_text()["filler"]}
    words = re.findall(r"[\w'-]+", kind.lower())
    return words, [word for word in words if word not in filler]
