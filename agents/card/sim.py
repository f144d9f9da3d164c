"""How `mock/sim` plays the Card Agent.

Rule vocabulary (one rule per failure bucket; a rule is *stated* when one sentence of the
system prompt matches every concept, case-insensitively; see `optimizer.trials.sim` for negation):

| bucket | concepts that must share a sentence | a general rule that states it |
|---|---|---|
| template_event | `event`; a gathering word (meeting, call, appointment, standup, dinner, class, session, reservation); a time word (time, date, scheduled, upcoming, future) | "When a note names a meeting or appointment with a concrete future time, use event." |
| template_link | `link`; url / web page / website / http | "A note that is mainly a URL to keep is a link." |
| template_transaction | `transaction`; purchase / payment / paid / bought / spent; amount / price / cost | "A purchase or payment with an amount is a transaction, even when it names a product." |
| template_rating | `rating`; score / stars / out of / verdict; review / rate / reviewed | "Use rating when the note gives a score or stars as its review of something." |
| template_place | `place`; visit / visited / venue / spot / restaurant; where / location / address | "Use place when the note is about visiting a venue and where it is." |
| template_person | `person`; someone / who / contact / met / new acquaintance; about / details / remember | "Use person when the note is mainly about remembering someone the user met and details about them." |
| template_quote | `quote`; said / wrote / words / saying; exact / verbatim / attributed / author | "Use quote for someone's words worth keeping verbatim, with the author." |
| template_metric | `metric`; measured / measurement / number / value; unit / reading / tracked | "Use metric for a measured value with its unit, such as a reading the user tracks." |
| template_task_routine | `task` or `routine`; to-do / todo / deadline / due / recurring / habit / every | "A to-do with a deadline is a task; a recurring habit is a routine." |
| template_mood | `mood`; feel / feeling / emotion; even / although / numbers / scale | "Use mood when the note is about how the user feels, even if it rates the feeling on a scale." |
| fact_preservation | keep / preserve / copy / retain; exact / exactly / verbatim / literal; time / url / amount / name | "Keep times, URLs, amounts and names exactly as written in the note." |
| multi_fact_day | fact_id / raw input id; exact / exactly / verbatim / as given / unchanged; other / another / earlier / same day | "Copy the fact_id exactly as given; never reuse one from another note of the same day." |
| trivial_input | empty / emoji / punctuation / trivial / almost nothing; still / always / even; save / card | "Even an empty or emoji-only input still gets a minimal saved card." |

What a failing Card Agent does, by bucket: template buckets put a tempting wrong template first
(sometimes keeping the right one second, worth half credit); `fact_preservation` paraphrases
the required facts away; `multi_fact_day` uses the fact_id of the day's first note; and
`trivial_input` answers in chat without saving.

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

GATHERING = r"meeting|call|appointment|standup|dinner|class|session|reservation"

RULES = {
    "template_event": Rule((r"\bevent\b", GATHERING, r"\btime\b|date|scheduled|upcoming|future")),
    "template_link": Rule((r"\blink\b", r"url|web ?page|website|http")),
    "template_transaction": Rule((r"\btransaction\b", r"purchase|payment|paid|bought|spent",
                                  r"amount|price|cost")),
    "template_rating": Rule((r"\brating\b", r"score|stars?|out of|verdict", r"review|\brate\b|reviewed")),
    "template_place": Rule((r"\bplace\b", r"visit|venue|spot|restaurant", r"where|location|address")),
    "template_person": Rule((r"\bperson\b", r"someone|\bwho\b|contact|\bmet\b|acquaintance",
                             r"about|details|remember")),
    "template_quote": Rule((r"\bquote\b", r"said|wrote|words|saying", r"exact|verbatim|attributed|author")),
    "template_metric": Rule((r"\bmetric\b", r"measure|number|value", r"\bunit|reading|tracked")),
    "template_task_routine": Rule((r"\b(task|routine)\b", r"to-?do|deadline|\bdue\b|recurring|habit|every")),
    "template_mood": Rule((r"\bmood\b", r"feel|emotion", r"\beven\b|although|numbers?|scale")),
    "fact_preservation": Rule((r"\b(keep|preserve|copy|retain)\b", r"exact|verbatim|literal",
                               r"\btimes?\b|url|amount|name")),
    "multi_fact_day": Rule((r"fact_?id|raw input id", r"exact|verbatim|as given|unchanged",
                            r"other|another|earlier|same day")),
    "trivial_input": Rule((r"empty|emoji|punctuation|trivial|almost nothing", r"\bstill\b|always|\beven\b",
                           r"\bsave|card")),
}

BASE_RATES = {
    "template_event": 0.45, "template_link": 0.8, "template_transaction": 0.5, "template_rating": 0.55,
    "template_place": 0.6, "template_person": 0.5, "template_quote": 0.65, "template_metric": 0.4,
    "template_task_routine": 0.45, "template_mood": 0.5, "fact_preservation": 0.45, "multi_fact_day": 0.55,
    "trivial_input": 0.35,
}

TEMPTING = {
    "event": "task", "task": "event", "routine": "task", "link": "article", "article": "link",
    "transaction": "rating", "rating": "article", "mood": "metric", "metric": "mood", "place": "event",
    "person": "conversation", "quote": "snippet", "compact": "snippet",
}
FALLBACKS = ("compact", "snippet", "article", "task", "event")


def _grader_config(task: Task, name: str) -> dict[str, Any]:
    return next((spec.config for spec in task.graders if spec.name == name), {})


def _wrong_template(expected: list[str]) -> str:
    for candidate in [TEMPTING.get(t) for t in expected] + list(FALLBACKS):
        if candidate and candidate not in expected:
            return candidate
    return "gallery"


def _strip(value: Any, pattern: re.Pattern) -> Any:
    if isinstance(value, str):
        return pattern.sub("", value).strip() or "note"
    if isinstance(value, list):
        return [_strip(item, pattern) for item in value]
    if isinstance(value, dict):
        return {key: _strip(item, pattern) for key, item in value.items()}
    return value


def failing_calls(task: Task, rng: random.Random) -> list[ToolCallSpec]:
    reference = task.reference_solution.tool_calls if task.reference_solution else []
    bucket = task.bucket
    if bucket == "trivial_input" or not reference:
        return []
    call = reference[0]
    arguments = dict(call.arguments)
    if bucket == "fact_preservation":
        substrings = _grader_config(task, "card_must_contain").get("substrings") or []
        if substrings:
            pattern = re.compile("|".join(re.escape(s) for s in substrings), re.IGNORECASE)
            arguments = {k: (_strip(v, pattern) if k in ("title", "ui_configs") else v) for k, v in arguments.items()}
    elif bucket == "multi_fact_day":
        wrong = re.sub(r"#ts_\d+$", "#ts_1", arguments.get("fact_id", ""))
        if wrong == arguments.get("fact_id"):
            wrong = re.sub(r"#ts_\d+$", "#ts_2", wrong)
        arguments["fact_id"] = wrong
        return [ToolCallSpec(name=call.name, arguments=arguments)] * 2
    else:
        expected = _grader_config(task, "card_template_choice").get("expected_template_ids") or []
        configs = [dict(c) for c in arguments.get("ui_configs", [])]
        wrong = {"template_id": _wrong_template(expected), "data": configs[0].get("data", {}) if configs else {}}
        keep_right = rng.random() < 0.3 and configs
        arguments["ui_configs"] = [wrong] + (configs[:1] if keep_right else [])
    return [ToolCallSpec(name=call.name, arguments=arguments)]


PROFILE = SimProfile(rules=RULES, base_rates=BASE_RATES, failing_calls=failing_calls,
                     rule_texts=load_rule_texts(Path(__file__).with_name("sim_rules.json")))
