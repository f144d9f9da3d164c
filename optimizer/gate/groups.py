"""Which groups the gate tests: the targeted buckets for improvement, and the harm family (every
other train bucket of the changed agent, the holdout split, all of those pooled, each regression
suite), with the buckets a patch names by the words of its changed lines."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from optimizer.gate.pairs import PairTable

WORD = re.compile(r"[a-z]+")


@dataclass
class Groups:
    """What the gate tests: the targeted buckets (improvement) and the harm family."""

    targets: list[tuple[str, str]]
    harm: list[tuple[str, str, str, list[tuple[str, str]]]]
    """(suite, label, kind, task keys) per group tested for harm."""
    named: frozenset[tuple[str, str]] = frozenset()
    """(suite, bucket) of the train buckets the patch names (`named_buckets`)."""


KIND_ORDER = {"bucket": 0, "holdout": 1, "pooled": 2, "regression": 3}
POOLED = ("*", "non-target (pooled)", "pooled")
"""The harm group of every non-target train task and holdout task of the changed agent together:
a harm spread thin over several buckets, too small in each to show there, adds up in it."""


def harm_group(suite: str, bucket: str, split: str, regression: bool) -> tuple[str, str, str]:
    """(suite, label, kind) of the group a task is tested in for harm: its regression suite, the
    holdout split, or its train bucket."""
    if regression:
        return suite, "regression", "regression"
    if split == "holdout":
        return "*", "holdout", "holdout"
    return suite, bucket, "bucket"


def is_named(group: tuple[str, str, str], named: Iterable[tuple[str, str]]) -> bool:
    """Whether a harm group (suite, label, kind) is a train bucket among `named` (suite, bucket)s."""
    suite, label, kind = group
    return kind == "bucket" and (suite, label) in named


def named_buckets(changed: Iterable[str], buckets: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    """The (suite, bucket)s that a patch's changed lines name: some line holds, as a word (or
    with a plural `s`), a word of three letters or more of the bucket's name that no other bucket
    of its suite has in its name (`template_mood`: `mood`; `template` is in many)."""
    buckets = sorted(set(buckets))
    words = {bucket: set(WORD.findall(bucket[1].lower())) for bucket in buckets}
    shared = Counter((suite, word) for (suite, _), own in words.items() for word in own)
    text = set(WORD.findall(" ".join(changed).lower()))
    return frozenset(bucket for bucket, own in words.items()
                     if any(len(word) >= 3 and shared[(bucket[0], word)] == 1 and (word in text or word + "s" in text)
                            for word in own))


def groups_of(table: PairTable, targets: Iterable[tuple[str, str]],
              named: Iterable[tuple[str, str]] = ()) -> Groups:
    """The targeted buckets, and every harm group with its tasks: the other train buckets (by
    suite and bucket), then the holdout split, then all of those together (`POOLED`, when there
    are two or more), then each regression suite. `named`: the buckets
    the patch names (`named_buckets`), for the harm thresholds."""
    targets = sorted(set(targets))
    members: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for key in sorted(table.tasks):
        task = table.tasks[key]
        group = harm_group(task.suite, task.bucket, task.split, task.regression)
        if group[2] == "bucket" and (group[0], group[1]) in targets:
            continue
        members.setdefault(group, []).append(key)
    pooled = [key for group, keys in members.items() if group[2] in ("bucket", "holdout") for key in keys]
    if sum(1 for group in members if group[2] in ("bucket", "holdout")) >= 2:
        members[POOLED] = sorted(pooled)
    order = sorted(members, key=lambda group: (KIND_ORDER[group[2]], group[0], group[1]))
    return Groups(targets, [(suite, label, kind, members[(suite, label, kind)]) for suite, label, kind in order],
                  frozenset(named))
