"""`optimizer nightly`: optimization iterations until a limit, stacking accepted patches.

The night works on one branch, `optimizer/nightly-<date>`, created at the base commit. Each
iteration is an `optimizer run` step whose base is the branch's tip, so an accepted patch
becomes the base of the next iteration and the branch ends as a stack of small commits, each
with its buckets, gate result and score changes in the message (the per-proposal branches are
removed once their commit is on the nightly branch; their records stay in the store).

Agents are worked on worst-first (the agent with the most failing train trials, as `run`
chooses) or alternately. The night stops at whichever comes first: `max_iterations`, the time
limit (checked between iterations), a budget in USD or tokens (enforced before every model
call, see `optimizer.ledger`), `patience` consecutive rejected iterations, or nothing left to
try. With `merge`, the branch is merged into the base branch when every commit on it passed
the strict gate. One job per repository (`optimizer.lock`). The state after each iteration is
in the store (`nightlies` table), so a report can always say how far the night got.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from datetime import date as Date
from typing import Any

from optimizer import gitops
from optimizer.errors import InputError
from optimizer.ledger import Budget, BudgetExceeded, Ledger, charging
from optimizer.lock import job_lock
from optimizer.loop import IterationResult, LoopContext, run_iteration
from optimizer.registry import get_agent
from optimizer.runner import new_run_id
from optimizer.suites import load_suite


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

    @property
    def accepted(self) -> list[dict[str, Any]]:
        return [row for row in self.iterations if row["status"] == "accepted"]

    def as_dict(self) -> dict[str, Any]:
        return {"nightly_id": self.nightly_id, "branch": self.branch, "base_ref": self.base_ref,
                "base_commit": self.base_commit, "tip_commit": self.tip_commit, "status": self.status,
                "stop_reason": self.stop_reason, "merged": self.merged, "iterations": self.iterations,
                "accepted": len(self.accepted), "spent_usd": self.spent_usd, "spent_tokens": self.spent_tokens}


def branch_name(day: Date, repo) -> str:
    """`optimizer/nightly-<date>`, with `-2`, `-3`... when that name is taken."""
    name = f"optimizer/nightly-{day.isoformat()}"
    number = 1
    while gitops.branch_exists(repo, name if number == 1 else f"{name}-{number}"):
        number += 1
    return name if number == 1 else f"{name}-{number}"


def run_nightly(ctx: LoopContext, *, suite_names: list[str] | None = None, base_ref: str | None = None,
                limits: NightlyLimits = NightlyLimits(), merge: bool = False, day: Date | None = None) -> NightlyResult:
    settings = ctx.settings
    root = ctx.project_root
    repo = gitops.open_repo(root)
    base = gitops.resolve_base(repo, base_ref)
    if merge and (repo.head.is_detached or repo.active_branch.name != base.ref):
        raise InputError(f"--merge merges into {base.ref!r}, which must be the checked-out branch", field="--merge",
                         fix=f"git switch {base.ref} first, or run without --merge")
    if merge and settings.gate != "strict":
        raise InputError("--merge needs the strict gate", field="--merge",
                         fix="drop --gate lenient, or merge by hand after review")
    names = suite_names or settings.suites
    agents = sorted({load_suite(name, root).spec.agent_name for name in names})
    for agent in agents:
        get_agent(agent)
    state_dir = root / settings.state_dir
    gitops.ignore_state_dir(state_dir)
    with job_lock(state_dir / "nightly.lock", "optimizer nightly", ctx.log):
        branch = branch_name(day or Date.today(), repo)
        repo.create_head(branch, base.commit)
        result = NightlyResult(nightly_id=new_run_id(), branch=branch, base_ref=base.ref, base_commit=base.commit,
                               tip_commit=base.commit)
        ctx.store.start_nightly(nightly_id=result.nightly_id, branch=branch, base_ref=base.ref,
                                base_commit=base.commit, tip_commit=base.commit, status="running",
                                settings_json={**settings.model_dump(), "limits": _limits_dict(limits),
                                               "host": socket.gethostname()},
                                state_json=result.as_dict())
        ctx.log(f"nightly {result.nightly_id}: branch {branch} at {base.commit[:12]} ({base.ref})")
        ledger = Ledger(ctx.store, budget=limits.budget, prices=dict(settings.model_prices),
                        scope={"nightly_id": result.nightly_id})
        try:
            with charging(ledger):
                _iterate(ctx, repo, result, limits, names, agents, ledger)
        except BaseException as exc:
            result.status, result.stop_reason = "crashed", f"{type(exc).__name__}: {exc}"
            _save(ctx, result, ledger)
            raise
        if merge:
            _merge(repo, result, ctx)
        result.status = "finished"
        _save(ctx, result, ledger)
        return result


def _iterate(ctx: LoopContext, repo, result: NightlyResult, limits: NightlyLimits, names: list[str],
             agents: list[str], ledger: Ledger) -> None:
    started = time.monotonic()
    rejections = 0
    resting: set[str] = set()
    """Agents with nothing to try at the current tip."""
    turn = 0
    while True:
        if len(result.iterations) >= limits.max_iterations:
            result.stop_reason = f"max_iterations ({limits.max_iterations})"
            return
        if limits.time_limit_s is not None and time.monotonic() - started >= limits.time_limit_s:
            result.stop_reason = f"time limit ({limits.time_limit_s:.0f} s)"
            return
        if rejections >= limits.patience:
            result.stop_reason = f"{rejections} consecutive rejected iterations"
            return
        candidates = [agent for agent in agents if agent not in resting]
        if not candidates:
            result.stop_reason = "nothing left to try at the current prompt"
            return
        agent = None
        if limits.order == "alternate":
            agent = candidates[turn % len(candidates)]
            turn += 1
        number = len(result.iterations) + 1
        ctx.log(f"nightly iteration {number} ({agent or 'worst-first'}) on {result.branch} "
                f"at {result.tip_commit[:12]}")
        try:
            iteration = run_iteration(ctx, suite_names=names, base_ref=result.branch, agent=agent)
        except BudgetExceeded as exc:
            result.iterations.append({"number": number, "agent": agent, "status": "budget_exhausted",
                                      "reason": str(exc)})
            result.stop_reason = f"budget: {exc}"
            ctx.log(f"stopping: {exc}")
            return
        row = _record(iteration, number, agent)
        result.iterations.append(row)
        if iteration.status == "accepted":
            accepted = iteration.accepted
            repo.heads[result.branch].commit = accepted.commit_sha  # fast-forward: its parent is the tip
            gitops.delete_branch(repo, accepted.branch)
            result.tip_commit = accepted.commit_sha
            rejections = 0
            resting.clear()
            ctx.log(f"nightly iteration {number}: accepted, {result.branch} now at {accepted.commit_sha[:12]}")
        elif iteration.status == "nothing_to_fix":
            resting.update([agent] if agent else agents)
        else:
            rejections += 1
            ctx.log(f"nightly iteration {number}: {iteration.status} ({rejections} in a row)")
        _save(ctx, result, ledger)


def _record(iteration: IterationResult, number: int, agent: str | None) -> dict[str, Any]:
    accepted = iteration.accepted
    return {"number": number, "iteration_id": iteration.iteration_id, "status": iteration.status,
            "agent": iteration.selection.agent if iteration.selection else agent,
            "targets": [f"{t.suite}/{t.bucket}" for t in iteration.selection.targets] if iteration.selection else [],
            "commit": accepted.commit_sha if accepted else None,
            "gate": accepted.decision.mode if accepted and accepted.decision else None,
            "reason": accepted.reason if accepted else "; ".join(p.reason for p in iteration.proposals),
            "rollouts": iteration.rollouts}


def _merge(repo, result: NightlyResult, ctx: LoopContext) -> None:
    import git

    if not result.accepted:
        ctx.log("nothing to merge: no patch was accepted")
        return
    if any(row["gate"] != "strict" for row in result.accepted):
        ctx.log("not merging: a commit on the branch did not pass the strict gate")
        return
    try:
        repo.git.merge("--no-ff", "--no-edit", "-m", f"Merge {result.branch} (optimizer nightly, "
                                                     f"{len(result.accepted)} accepted patch(es))", result.branch)
    except git.GitCommandError as exc:
        try:
            repo.git.merge("--abort")
        except git.GitCommandError:
            pass
        raise InputError(f"git could not merge {result.branch}: {exc.stderr.strip()[:300]}", field="--merge",
                         fix="commit or stash your changes to the prompt files, then merge the branch by hand") \
            from None
    result.merged = True
    ctx.log(f"merged {result.branch} into {result.base_ref}")


def _save(ctx: LoopContext, result: NightlyResult, ledger: Ledger) -> None:
    result.spent_usd, result.spent_tokens = ledger.spent_usd, ledger.spent_tokens
    ctx.store.update_nightly(result.nightly_id, status=result.status, tip_commit=result.tip_commit,
                             state_json=result.as_dict())


def _limits_dict(limits: NightlyLimits) -> dict[str, Any]:
    return {"max_iterations": limits.max_iterations, "time_limit_s": limits.time_limit_s,
            "budget_usd": limits.budget.usd, "budget_tokens": limits.budget.tokens, "patience": limits.patience,
            "order": limits.order}


def parse_duration(text: str) -> float:
    """`90m`, `8h`, `3600s` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    raw = text.strip().lower()
    try:
        return float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        raise InputError(f"cannot read the duration {text!r}", field="--time-limit",
                         fix="e.g. 90m, 8h or 3600s") from None


