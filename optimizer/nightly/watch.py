"""The watch: patches a night merged keep being tested on later nights, and one later shown
harmful is reverted.

A gate decision has a few pairs per harm group; a merged patch whose harm to some bucket was
too small to show in them stays in the prompt for good, and nobody reads an unattended night's
diff. So every prompt patch the optimizer committed into the base branch's history (its commit
message names its `Iteration:` and `Targeted buckets:`) is *watched*: on each later merging
night, the prompt at the tip is compared with the same prompt with that patch taken out (a
three-way merge, as `git revert` does, or block by block where that conflicts:
`without_patch`), in fresh pairs at trial indexes of their own
(`WATCH_INDEX` and up, never read by the gate), `watch_rounds` pairs per task of every harm
group of the patch's agent: its other train buckets, the holdout split and all of those pooled,
as the gate groups them (`optimizer.gate.groups_of`).

Evidence accumulates across nights: each group's pairs, in the order they were run, feed the
gate's own harm bets (`GroupStats`: the sign bets on the score changes and on the pass/fail
flips, averaged), with the prompt without the patch in the base's place. Under the null
hypothesis that the patch does not lower the group, the two trials of every pair are
exchangeable whichever night ran them, so the bets' wealth is a test martingale over the
concatenated sequence and may be read after every night (Ville's inequality; the e-values of
the nights multiply). The patch is **reverted** when some group's wealth reaches the gate's
threshold for it (m / `alpha_harm`, a Bonferroni over the m groups), by a commit on the nightly
branch that carries the evidence. It **leaves the watch** when every group's bets have fallen to
`CLEARED_BELOW` after `clear_after` pairs (shown safe), or after `watch_nights` nights without
either (the watch ended). The state is kept in each night's record, so the next night, and a
resumed one, goes on from it.
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optimizer.gate import CLEARED_BELOW, GroupStats
from optimizer.gitops import AUTHOR_NAME, WATCH_REVERT, read_at

WATCH_INDEX = 2_000_000
"""First trial index of watch trials: past the gate's (a few per task) and the screening ones
(`optimizer.proposal.screening.SCREEN_INDEX`, one million up), so no pair is ever counted twice."""
TARGETS = re.compile(r"^Targeted buckets: (.+)$", re.MULTILINE)
ITERATION = re.compile(r"^Iteration: (\S+)$", re.MULTILINE)
REVERTS = re.compile(r"^Reverts: ([0-9a-f]{40})$", re.MULTILINE)


@dataclass
class GroupEvidence:
    """One harm group's watch pairs so far, in the order run: the change from the prompt without
    the patch to the prompt with it, and the pass/fail flip (-1: only the prompt without passed)."""

    label: str
    diffs: list[float] = field(default_factory=list)
    flips: list[float] = field(default_factory=list)

    def stats(self) -> GroupStats:
        change = sum(self.diffs) / len(self.diffs) if self.diffs else 0.0
        pass_change = sum(self.flips) / len(self.flips) if self.flips else 0.0
        return GroupStats(0, len(self.diffs), math.nan, math.nan, change, [], list(self.diffs), unjudged=False,
                          flips=list(self.flips), pass_change=pass_change)


@dataclass
class Watched:
    """A merged prompt patch under watch."""

    commit: str
    iteration_id: str
    headline: str
    agent: str
    targets: list[str]
    """`suite/bucket` of the buckets the patch was made for (they are not harm groups)."""
    groups: dict[str, GroupEvidence] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    """Watch pairs run so far per task (`suite/task`): the next pair's index is `WATCH_INDEX` plus this."""
    nights: int = 0
    status: str = "watching"
    """watching | revert (shown harmful, to be reverted) | reverted | cleared | ended"""
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Watched":
        groups = {label: GroupEvidence(**value) for label, value in (data.get("groups") or {}).items()}
        return cls(**{**data, "groups": groups})


def patches_in(repo, commit: str, agents: dict[str, str]) -> list[Watched]:
    """The optimizer's prompt patches in the history of `commit`, oldest first, less the ones a
    later commit reverts. `agents`: agent name -> its prompt file's path in the repository."""
    log = repo.git.log("--format=%H%x00%an%x00%s%x00%B%x1e", commit)
    found, reverted = [], set()
    for record in log.split("\x1e"):
        if not record.strip():
            continue
        sha, author, subject, body = record.strip("\n").split("\x00", 3)
        reverted.update(REVERTS.findall(body))
        targets, iteration = TARGETS.search(body), ITERATION.search(body)
        if author != AUTHOR_NAME or not targets or not iteration:
            continue
        agent = subject.split(":", 1)[0].strip()
        if agent not in agents:
            continue
        found.append(Watched(sha, iteration.group(1), subject, agent,
                             [name.strip() for name in targets.group(1).split(",")]))
    return [patch for patch in reversed(found) if patch.commit not in reverted]


def without_patch(repo, tip: str, commit: str, path: str) -> str | None:
    """The prompt at `tip` with `commit`'s change to it taken out: a three-way merge of the tip's
    text with the commit's parent, against the commit's (what `git revert` does to the file); when
    that conflicts, as it does when a later patch added its lines right beside this one's, each
    changed block of the commit (`ablation.parts`) is undone where its new lines still stand,
    once, in the tip's text. None when neither works (a later patch rewrote the same lines)."""
    tip_text, patched, parent = (read_at(repo, ref, path) for ref in (tip, commit, f"{commit}^"))
    with tempfile.TemporaryDirectory(prefix="optimizer-watch-") as folder:
        files = []
        for name, text in zip(("tip", "patched", "parent"), (tip_text, patched, parent)):
            file = Path(folder) / name
            file.write_text(text, encoding="utf-8")
            files.append(str(file))
        merged = subprocess.run(["git", "merge-file", "-p", *files], capture_output=True, text=True)
    return merged.stdout if merged.returncode == 0 else _undo_blocks(tip_text, patched, parent)


def _undo_blocks(tip: str, patched: str, parent: str) -> str | None:
    """`tip` with each changed block of parent -> patched undone where its new lines occur exactly
    once (a block that only removed lines cannot be found again: None)."""
    from optimizer.proposal.ablation import parts

    text = tip
    for part in parts(parent, patched):
        new, old = "".join(part.new), "".join(part.old)
        if not new.strip() or text.count(new) != 1:
            return None
        text = text.replace(new, old, 1)
    return text


def judge(entry: Watched, thresholds: dict[str, float], *, clear_after: int, watch_nights: int) -> None:
    """After a night's pairs: mark the patch `revert` when some group's bets reached its
    threshold, `cleared` when every group's bets fell to `CLEARED_BELOW` after `clear_after`
    pairs, `ended` after `watch_nights` nights; else it stays `watching`."""
    shown = []
    for label, evidence in sorted(entry.groups.items()):
        stats = evidence.stats()
        if stats.harm_evalue >= thresholds[label]:
            shown.append(f"{label} fell {stats.change:+.2f} in mean score and {stats.pass_change:+.2f} in pass "
                         f"rate over {stats.pairs} pairs, e-value {stats.harm_evalue:.1f} >= {thresholds[label]:.0f}")
    if shown:
        entry.status, entry.reason = "revert", "; ".join(shown)
        return
    settled = [evidence.stats() for evidence in entry.groups.values()]
    if settled and all(stats.pairs >= clear_after and stats.harm_wealth <= CLEARED_BELOW for stats in settled):
        entry.status, entry.reason = "cleared", f"every group's bets on a drop fell to {CLEARED_BELOW} or below"
    elif entry.nights >= watch_nights:
        entry.status, entry.reason = "ended", f"{entry.nights} nights without evidence either way"


def revert_message(entry: Watched, night: str) -> str:
    """The revert commit's message: what is reverted and the evidence."""
    lines = [f"Revert \"{entry.headline}\" {WATCH_REVERT}", "",
             f"The watch shows this patch harmful after {entry.nights} night(s) of paired trials of the prompt with "
             "and without it (anytime-valid harm bets, Bonferroni over its harm groups):", f"  {entry.reason}", "",
             "Pairs per harm group (mean change with the patch, pass-rate change):"]
    for label, evidence in sorted(entry.groups.items()):
        stats = evidence.stats()
        lines.append(f"  {label}: {stats.pairs} pairs, {stats.change:+.2f}, {stats.pass_change:+.2f}, "
                     f"e-value {stats.harm_evalue:.1f}")
    lines += ["", f"Reverts: {entry.commit}", f"Night: {night}"]
    return "\n".join(lines) + "\n"


@dataclass
class WatchNight:
    """What a night's watch runs: the patches still watched, and its settings."""

    entries: list[Watched]
    rounds: int
    """Pairs per task of every harm group of a watched patch, each night (`watch_rounds`)."""
    nights: int
    """Nights a patch is watched at most (`watch_nights`)."""


def run_watch(night: WatchNight, *, repo, tip: str, planned, prompt_paths: dict[str, str], screen, policy,
              log, non_voting=()) -> None:
    """One night's pairs for every watched patch, then its verdict (`judge`). `screen(items,
    agent, prompt, label)` runs trials of one prompt (`optimizer.loop.staging.Stage.screen`);
    the judges in `non_voting` count in no pair, as in the gate."""
    from optimizer.gate import PairTable, group_stats, groups_of
    from optimizer.gate.pairs import TaskKey
    from optimizer.trials.runner import PlannedTrial

    for entry in night.entries:
        path = prompt_paths.get(entry.agent)
        if entry.status != "watching" or path is None:
            continue
        without = without_patch(repo, tip, entry.commit, path)
        with_text = repo.git.show(f"{tip}:{path}")
        if without is None or without.strip() == with_text.strip():
            entry.status = "ended"
            entry.reason = ("a later change rewrote its lines: it can no longer be taken out on its own"
                            if without is None else "its change is no longer in the prompt")
            continue
        items = {(item.suite.name, item.task.id): item for item in planned
                 if item.suite.spec.agent_name == entry.agent and not item.reserve}
        layout = PairTable()
        for (suite, task_id), item in items.items():
            layout.tasks[(suite, task_id)] = TaskKey(suite, task_id, item.task.bucket, item.task.split,
                                                     item.suite.spec.kind == "regression")
        targets = {tuple(name.split("/", 1)) for name in entry.targets if "/" in name}
        groups = groups_of(layout, targets).harm
        keys = sorted({key for _, _, _, members in groups for key in members})
        runs = [PlannedTrial(items[key].suite, items[key].task, WATCH_INDEX + entry.done.get("/".join(key), 0) + r)
                for key in keys for r in range(night.rounds)]
        label = f"watch {entry.commit[:12]}"
        after = screen(runs, entry.agent, with_text, f"{label}: with the patch")
        before = screen(runs, entry.agent, without, f"{label}: without it")
        table = PairTable(non_voting)
        table.add_all(before, after, {suite for (suite, _), task in layout.tasks.items() if task.regression})
        for key in keys:
            entry.done["/".join(key)] = entry.done.get("/".join(key), 0) + night.rounds
        for suite, name, _, members in groups:
            stats = group_stats(table, members)
            group = name if suite == "*" else f"{suite}/{name}"
            evidence = entry.groups.setdefault(group, GroupEvidence(group))
            evidence.diffs += stats.diffs
            evidence.flips += stats.flips or []
        entry.nights += 1
        threshold = max(1, len(groups)) / policy.alpha_harm
        judge(entry, {group: threshold for group in entry.groups}, clear_after=policy.clear_after,
              watch_nights=night.nights)
        log(f"watch: {entry.headline} ({entry.commit[:12]}): {len(runs)} pairs, night {entry.nights}: "
            f"{entry.status}{' (' + entry.reason + ')' if entry.reason else ''}")
