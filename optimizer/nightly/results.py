"""What a night records and is limited by: `NightlyLimits`, `NightlyResult` (the state kept in the
store and written as `--json`), the row of each of its iterations, and how the console shows them."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from optimizer.errors import InputError
from optimizer.ledger import Budget

@dataclass(frozen=True)
class NightlyLimits:
    max_iterations: int = 10
    time_limit_s: float | None = None
    budget: Budget = field(default_factory=Budget)
    patience: int = 3
    """Consecutive rejected iterations after which the night stops."""
    order: str = "worst-first"
    """`worst-first` or `alternate`."""


@dataclass
class NightlyResult:
    nightly_id: str
    branch: str
    base_ref: str
    base_commit: str
    tip_commit: str
    status: str = "running"
    stop_reason: str = ""
    iterations: list[dict[str, Any]] = field(default_factory=list)
    merged: bool = False
    spent_usd: float = 0.0
    spent_tokens: int = 0
    started_epoch: float = field(default_factory=time.time)
    current: dict[str, Any] | None = None
    """The iteration under way: {number, iteration_id, agent}."""
    suites: list[str] = field(default_factory=list)
    merge: bool = False
    resumed: int = 0
    interrupted: list[str] = field(default_factory=list)
    """Iterations a kill ended before they finished: run again, but the candidates they had put
    to the gate spent their share of `night_alpha` all the same (`decisions`)."""
    watch: list[dict[str, Any]] | None = None
    """The watch of merged patches after this night's (`optimizer.nightly.watch.Watched`); None until it ran."""
    watch_iteration: str | None = None
    reverts: list[str] = field(default_factory=list)
    """Commits the watch added to the branch, each reverting a patch shown harmful."""

    @property
    def accepted(self) -> list[dict[str, Any]]:
        return [row for row in self.iterations if row["status"] == "accepted"]

    def as_dict(self) -> dict[str, Any]:
        return {"nightly_id": self.nightly_id, "branch": self.branch, "base_ref": self.base_ref,
                "base_commit": self.base_commit, "tip_commit": self.tip_commit, "status": self.status,
                "stop_reason": self.stop_reason, "merged": self.merged, "iterations": self.iterations,
                "accepted": len(self.accepted), "spent_usd": self.spent_usd, "spent_tokens": self.spent_tokens,
                "started_epoch": self.started_epoch, "current": self.current, "suites": self.suites,
                "merge": self.merge, "resumed": self.resumed, "interrupted": self.interrupted, "watch": self.watch,
                "watch_iteration": self.watch_iteration, "reverts": self.reverts}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "NightlyResult":
        state = record.get("state") or {}
        fields = {name: state[name] for name in ("status", "stop_reason", "iterations", "merged", "spent_usd",
                                                 "spent_tokens", "started_epoch", "current", "suites", "merge",
                                                 "resumed", "interrupted", "watch", "watch_iteration", "reverts")
                  if name in state}
        return cls(nightly_id=record["nightly_id"], branch=record["branch"], base_ref=record["base_ref"],
                   base_commit=record["base_commit"], tip_commit=record["tip_commit"], **fields)


def iteration_row(store, number: int, iteration_id: str, status: str,
                  agent: str | None) -> tuple[dict[str, Any], dict | None]:
    """The night's record of a finished iteration, read from the store (so an iteration settled
    after a resume reads exactly like one that ran through), and its accepted proposal if any."""
    record = store.iterations.get(iteration_id) or {}
    proposals = store.proposals.rows(iteration_id=iteration_id)
    accepted = next((p for p in proposals if p["status"] == "accepted"), None)
    row = {"number": number, "iteration_id": iteration_id, "status": status,
           "agent": record.get("agent") or agent, "targets": record.get("targets") or [],
           "commit": accepted["commit_sha"] if accepted else None,
           "gate": (accepted.get("decision") or {}).get("mode") if accepted else None,
           "verdict": (accepted.get("decision") or {}).get("verdict") or "merge" if accepted else None,
           "reason": accepted["reason"] if accepted else "; ".join(p["reason"] for p in proposals),
           "rollouts": (record.get("summary") or {}).get("rollouts")}
    decision = (accepted or {}).get("decision") or {}
    for split, key in (("train", "overall"), ("holdout", "holdout")):
        if (decision.get(key) or {}).get("pairs"):
            row[split] = {name: decision[key].get(name) for name in ("before", "after", "pass_change", "pairs")}
    return row, accepted


def split_changes(row: dict[str, Any]) -> str:
    """`train 0.61 -> 0.66, holdout 0.70 -> 0.68 (pass -0.05, 20 pairs)` for an accepted
    iteration's record: the train split (described, not tested) beside the holdout, whose pass
    rate a reviewer checks did not fall (mean scores; the pass rate's change in brackets)."""
    parts = []
    for split in ("train", "holdout"):
        if row.get(split):
            change = row[split]
            passed = f"pass {change['pass_change']:+.2f}, " if change.get("pass_change") is not None else ""
            parts.append(f"{split} {change['before']:.2f} -> {change['after']:.2f} ({passed}{change['pairs']} pairs)")
    return ", ".join(parts)


def limits_values(limits: NightlyLimits) -> dict[str, Any]:
    return {"max_iterations": limits.max_iterations, "time_limit": limits.time_limit_s,
            "budget_usd": limits.budget.usd, "budget_tokens": limits.budget.tokens, "patience": limits.patience,
            "order": limits.order}


def limits_of(values: dict[str, Any]) -> NightlyLimits:
    return NightlyLimits(max_iterations=values["max_iterations"], time_limit_s=values["time_limit"],
                         budget=Budget(usd=values["budget_usd"], tokens=values["budget_tokens"]),
                         patience=values["patience"], order=values["order"])


def parse_duration(text: str) -> float:
    """`90m`, `8h`, `1d`, `3600s` or plain seconds -> seconds (more than zero)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    raw = text.strip().lower()
    try:
        seconds = float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise InputError(f"{text!r} is not a duration above zero", field="--time-limit",
                         fix="a number above zero, in seconds or with a unit s, m, h or d: e.g. 90m, 8h or 3600s")
    return seconds
