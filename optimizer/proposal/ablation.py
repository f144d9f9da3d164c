"""Every changed part of a patch earns its place: leave-one-out ablation on screening trials.

A patch often changes more than what fixes its targets: a weak patcher's answer is the right
rule plus a line about something else, and the gate judges that line only by what it does to
other buckets, where a harm spread over a one-task bucket takes many pairs to show. So before
the gate, a patch of several changed parts (the non-equal blocks of a line diff of the prompt,
each inserted line a part of its own) is screened part by part: the patched prompt and, for
each part, the patched prompt with that part undone, each on `trials` screening trials per
targeted bucket of its train tasks. Each target keeps the part whose removal lowers it most
surely (the gate asks every target to improve); any other part is kept only when its removal
lowers some targeted bucket's screening pass rate or score *significantly* (`removal_p`:
Fisher's exact test on the passes, the Mann-Whitney U test on the scores, both one-sided,
Bonferroni over the two tests and the targets, at `KEEP_BELOW`); the others did nothing shown for
the targets and are dropped. A fixed margin on the difference of two 16-trial means kept a part
that does nothing 36-43% of the time (the difference's spread is about 0.1); the test at 0.10
kept one 3.9-5.9% of the time. Every part's test shares the whole patch's trials, so a lucky
whole-patch sample makes every part look useful at once, the rider with the rule; on the
simulator's months such riders reached `main`. So a part beside a target's surest one must pass
at 0.02: 0.1-1.1% kept (`benchmarks/ablation_keep.py` measures both levels). The gate
then judges what is left on fresh pairs, as any patch: the screening trials are
at indexes of their own (`optimizer.proposal.screening.SCREEN_INDEX` and up), which the gate never reads,
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

KEEP_BELOW = 0.02
"""A part that is no target's surest is kept when the p-value of its removal lowering a target
(`removal_p`) is at most this."""


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
    p_values: dict[str, float] = field(default_factory=dict)
    """Per part (`part <n>`), the p-value that its removal lowers a target (`removal_p`)."""

    def summary(self) -> str:
        if not self.dropped:
            return (f"all {len(self.kept)} changed part(s) kept: each is a target's surest or lowered a target "
                    f"significantly when undone (p <= {KEEP_BELOW})")
        shown = "; ".join(part.describe() for part in self.dropped)
        return (f"dropped {len(self.dropped)} of {len(self.kept) + len(self.dropped)} changed part(s) that helped no "
                f"target most surely and whose removal lowered no target's screening pass rate or score "
                f"significantly (p > {KEEP_BELOW}, {self.trials} screening trials): {shown}")


Screened = dict[str, list[tuple[float, float]]]
"""Per targeted bucket, each screening trial's (score, passed as 0 or 1)."""


def bucket_p(whole: Screened, without: Screened) -> dict[str, float]:
    """Per targeted bucket, the p-value that undoing a part lowers it: Fisher's exact test that
    the whole patch passes more often than the patch without the part, and the Mann-Whitney U
    test that its scores are higher (both one-sided: a part is there to help), the smaller of the
    two times two (Bonferroni), at most 1."""
    from scipy.stats import fisher_exact, mannwhitneyu

    found = {}
    for bucket, values in whole.items():
        other = without.get(bucket) or []
        if not values or not other:
            continue
        passed, passed_without = sum(p for _, p in values), sum(p for _, p in other)
        tests = [fisher_exact([[passed, len(values) - passed], [passed_without, len(other) - passed_without]],
                              alternative="greater")[1]]
        scores, scores_without = [s for s, _ in values], [s for s, _ in other]
        if len(set(scores) | set(scores_without)) > 1:
            tests.append(mannwhitneyu(scores, scores_without, alternative="greater").pvalue)
        clean = [p if p == p else 1.0 for p in tests]  # NaN (no spread): no evidence
        found[bucket] = float(min(1.0, min(clean) * 2))
    return found


def removal_p(whole: Screened, without: Screened) -> float:
    """The p-value that undoing a part lowers some targeted bucket (`any_bucket` of `bucket_p`)."""
    return any_bucket(bucket_p(whole, without))


def any_bucket(per_bucket: dict[str, float]) -> float:
    """The smallest of per-bucket p-values times the number of buckets (Bonferroni), at most 1."""
    return min(1.0, min(per_bucket.values(), default=1.0) * len(per_bucket))


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
    target keeps the part whose removal lowers it most surely, and another part is kept when
    undoing it lowers *some* target significantly (`removal_p` at most `KEEP_BELOW`; a rule's
    effect on the pass rate can be larger than on the score, where a failed trial keeps partial
    credit). None when the patch has fewer than two parts (nothing to leave out)."""
    found = parts(base, patched)
    if len(found) < 2:
        return None
    if kept_file is not None and kept_file.is_file():  # decided before (a resumed iteration): no new trials
        record = json.loads(kept_file.read_text(encoding="utf-8"))
        kept = [part for part in found if part.order in record["kept"]]
        return Ablation(apply(base, kept), kept, [p for p in found if p.order not in record["kept"]],
                        record["scores"], record["trials"], record.get("p_values", {}))
    screened_whole = score(patched, "ablation: the whole patch")
    whole = _means(screened_whole)
    scores = {"all": statistics.mean(value[0] for value in whole.values())}
    trials = sum(count for _, _, count in whole.values())
    per_part: list[dict[str, float]] = []
    """Per part, per targeted bucket: the p-value of its removal lowering the bucket (`bucket_p`)."""
    drops: list[dict[str, float]] = []
    """Per part, per targeted bucket: the larger drop of its mean score or pass rate without the part."""
    for number, part in enumerate(found, 1):
        screened = score(apply(base, [p for p in found if p is not part]), f"ablation: without part {number}")
        without = _means(screened)
        trials += sum(count for _, _, count in without.values())
        scores[f"without {number}"] = statistics.mean(value[0] for value in without.values())
        per_part.append(bucket_p(screened_whole, screened))
        drops.append({bucket: max(whole[bucket][0] - without[bucket][0], whole[bucket][1] - without[bucket][1])
                      for bucket in per_part[-1]})
    p_values = {f"part {number}": any_bucket(found_p) for number, found_p in enumerate(per_part, 1)}
    chosen = {min(range(len(found)), key=lambda i: (per_part[i].get(bucket, 1.0), -drops[i].get(bucket, 0.0)))
              for bucket in whole}  # each target keeps the part that helps it most: it must improve at the gate
    chosen |= {i for i in range(len(found)) if p_values[f"part {i + 1}"] <= KEEP_BELOW}
    kept = [part for i, part in enumerate(found) if i in chosen]
    dropped = [part for i, part in enumerate(found) if i not in chosen]
    if kept_file is not None:
        kept_file.parent.mkdir(parents=True, exist_ok=True)
        kept_file.write_text(json.dumps({"kept": [part.order for part in kept], "scores": scores, "trials": trials,
                                         "p_values": p_values}), encoding="utf-8")
    return Ablation(apply(base, kept), kept, dropped, scores, trials, p_values)
