"""Every changed part of a patch earns its place: leave-one-out ablation on screening trials.

A patch often changes more than what fixes its targets: a weak patcher's answer is the right
rule plus a line about something else, and the gate judges that line only by what it does to
other buckets, where a harm spread over a one-task bucket takes many pairs to show. So before
the gate, a patch of several changed parts (the non-equal blocks of a line diff of the prompt,
each inserted line a part of its own) is screened part by part: the patched prompt and, for
each part, the patched prompt with that part undone, each on `trials` screening trials per
targeted bucket of its train tasks. A part whose removal lowers no targeted bucket's mean
screening score or pass rate by more than `MARGIN` did nothing for the targets, and is
dropped; at least the part whose removal lowered them most is kept. The gate then judges what is left on fresh pairs, as any patch: the screening trials are
at indexes of their own (`optimizer.search.SCREEN_INDEX` and up), which the gate never reads,
so choosing the parts on them leaves its levels as they were. The decision is kept in a file
named by the base, the patch, the targets and the trials, so a resumed iteration that gets the
same patch again reuses it instead of screening again.
"""

from __future__ import annotations

import difflib
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

MARGIN = 0.05
"""A part is kept when undoing it lowers some target's mean screening score or pass rate by more
than this."""


@dataclass(frozen=True)
class Part:
    """One changed block of the prompt: base lines [base_start, base_end) became `new`. Lines
    inserted together are a part each (with the blank lines that follow them): a weak answer
    appends its right rule and its stray line side by side."""

    base_start: int
    base_end: int
    new: tuple[str, ...]
    old: tuple[str, ...]
    order: int = 0

    def describe(self) -> str:
        lines = self.new or tuple(f"(removed) {line}" for line in self.old)
        text = " / ".join(line.strip() for line in lines if line.strip())
        return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class Ablation:
    text: str
    """The prompt with only the kept parts."""
    kept: list[Part]
    dropped: list[Part]
    scores: dict[str, float] = field(default_factory=dict)
    """Mean screening score of the whole patch (`all`) and without each part (`without <n>`)."""
    trials: int = 0

    def summary(self) -> str:
        if not self.dropped:
            return f"every one of {len(self.kept)} changed part(s) lowered the targets when undone; all kept"
        shown = "; ".join(part.describe() for part in self.dropped)
        return (f"dropped {len(self.dropped)} of {len(self.kept) + len(self.dropped)} changed part(s) whose removal "
                f"lowered no target's screening score or pass rate by more than {MARGIN} ({self.trials} screening "
                f"trials): {shown}")


Screened = dict[str, list[tuple[float, float]]]
"""Per targeted bucket, each screening trial's (score, passed as 0 or 1)."""


def _means(screened: Screened) -> dict[str, tuple[float, float, int]]:
    """Per bucket: mean score, pass rate, trials."""
    return {bucket: (statistics.mean(s for s, _ in values), statistics.mean(p for _, p in values), len(values))
            for bucket, values in screened.items() if values}


def parts(base: str, patched: str) -> list[Part]:
    """The changed blocks of `patched` against `base`, by lines."""
    old, new = base.splitlines(keepends=True), patched.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    found: list[Part] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag != "insert":
            found.append(Part(i1, i2, tuple(new[j1:j2]), tuple(old[i1:i2]), len(found)))
            continue
        for group in _line_groups(new[j1:j2]):
            found.append(Part(i1, i2, tuple(group), (), len(found)))
    return found


def _line_groups(lines: list[str]) -> list[list[str]]:
    """Inserted lines, one group per non-blank line with the blank lines after it (blank lines
    before the first go with it)."""
    groups: list[list[str]] = []
    for line in lines:
        if line.strip() and (groups and any(text.strip() for text in groups[-1])):
            groups.append([line])
        elif groups:
            groups[-1].append(line)
        else:
            groups.append([line])
    return groups


def apply(base: str, chosen: list[Part]) -> str:
    """`base` with only the `chosen` parts applied."""
    old = base.splitlines(keepends=True)
    out, at = [], 0
    for part in sorted(chosen, key=lambda p: (p.base_start, p.order)):
        out += old[at:part.base_start] + list(part.new)
        at = max(at, part.base_end)
    return "".join(out + old[at:])


def ablate(base: str, patched: str, score: Callable[[str, str], Screened],
           kept_file: Path | None = None) -> Ablation | None:
    """Leave-one-out over the patch's parts (see the module docstring). `score(prompt, label)`
    runs the screening trials of one prompt and returns them by targeted bucket (`Screened`): a
    part is kept when undoing it lowers *some* target's mean score or pass rate by more than
    `MARGIN` (with two targets, each rule helps its own; a rule's effect on the pass rate can be
    larger than on the score, where a failed trial keeps partial credit). None when the patch
    has fewer than two parts (nothing to leave out)."""
    found = parts(base, patched)
    if len(found) < 2:
        return None
    if kept_file is not None and kept_file.is_file():  # decided before (a resumed iteration): no new trials
        record = json.loads(kept_file.read_text(encoding="utf-8"))
        kept = [part for part in found if part.order in record["kept"]]
        return Ablation(apply(base, kept), kept, [p for p in found if p.order not in record["kept"]],
                        record["scores"], record["trials"])
    whole = _means(score(patched, "ablation: the whole patch"))
    scores = {"all": statistics.mean(value[0] for value in whole.values())}
    trials = sum(count for _, _, count in whole.values())
    drops: list[float] = []
    for number, part in enumerate(found, 1):
        without = _means(score(apply(base, [p for p in found if p is not part]), f"ablation: without part {number}"))
        trials += sum(count for _, _, count in without.values())
        scores[f"without {number}"] = statistics.mean(value[0] for value in without.values())
        drops.append(max(max(whole[b][0] - without[b][0], whole[b][1] - without[b][1]) for b in whole if b in without))
    kept = [part for part, drop in zip(found, drops) if drop > MARGIN]
    if not kept:
        kept = [found[max(range(len(found)), key=lambda i: drops[i])]]
    dropped = [part for part in found if all(part is not chosen for chosen in kept)]
    if kept_file is not None:
        kept_file.parent.mkdir(parents=True, exist_ok=True)
        kept_file.write_text(json.dumps({"kept": [part.order for part in kept], "scores": scores, "trials": trials}),
                             encoding="utf-8")
    return Ablation(apply(base, kept), kept, dropped, scores, trials)
