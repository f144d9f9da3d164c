"""`optimizer nightly`: optimization iterations until a limit, stacking accepted patches.

The night works on one branch, `optimizer/nightly-<date>`, created at the base commit. Each
iteration is an `optimizer run` step whose base is the branch's tip, so an accepted patch
becomes the base of the next iteration and the branch ends as a stack of small commits, each
with its buckets, gate result and score changes in the message (the per-proposal branches are
removed once their commit is on the nightly branch; their records stay in the store).

By default the night covers every capability suite under `suites/` (so both agents); `--suite`
narrows it. Agents are worked on worst-first (the agent with the most failing train tasks, as `run`
chooses) or alternately. The night stops at whichever comes first: `max_iterations`, the time
limit (checked between iterations), a budget in USD or tokens (enforced before every model
call, see `optimizer.ledger`), `patience` consecutive rejected iterations, or nothing left to
try. With `merge`, the branch is merged into the base branch when every commit on it passed
the strict gate. One job per repository (`optimizer.nightly.lock`), on every machine that shares a
PostgreSQL store.

Crash safety: the night's state (iterations done, the one under way, the branch tip) is saved in
the store before and after every iteration, each finished trial and proposal is in the store as
soon as it exists, and the nightly branch only ever moves by a fast-forward to an accepted
commit. `--resume` picks up the newest night of this repository that did not finish, with the
settings it started with (`optimizer.settings.night`): it removes the worktrees and
proposal branches a killed process left, completes the bookkeeping of an iteration that had
finished (e.g. fast-forwards the branch to a patch that was accepted just before the kill), or
runs an interrupted iteration again, keeping every trial already recorded (see
`optimizer.loop.staging.run_trials`). Spent budget and elapsed time carry over.
"""

from __future__ import annotations

import time
from datetime import date as Date
from pathlib import Path
from typing import Any, Collection

from optimizer import gitops
from optimizer.proposal.box import remove_stray_boxes
from optimizer.errors import InputError
from optimizer.ledger import BudgetExceeded, Ledger, charging
from optimizer.nightly.checks import branch_name, check_night
from optimizer.nightly.lock import repository_identity, repository_lock
from optimizer.nightly.results import NightlyLimits, NightlyResult, iteration_row, limits_of, limits_values
from optimizer.loop.iteration import LoopContext, run_iteration
from optimizer.settings.night import (left_here, night_values, override_names, owned, parts_of, restore, resumable,
                                      stored_values)
from optimizer.registry import get_agent
from optimizer.trials.runner import new_run_id
from optimizer.nightly.witness import check_witness, ended_iterations, write_witness
from optimizer.store.digest import night_scope
from optimizer.store.iterations import VERDICTS
from optimizer.nightly.watch import Watched, WatchNight, patches_in, revert_message, without_patch


def run_nightly(ctx: LoopContext, *, suite_names: list[str] | None = None, base_ref: str | None = None,
                limits: NightlyLimits = NightlyLimits(), merge: bool = False, day: Date | None = None,
                resume: bool = False, given: Collection[str] = (), overrides: Collection[str] = ()) -> NightlyResult:
    """Run a night; with `resume`, go on with the newest unfinished night of this repository, with
    the settings it stored (`optimizer.settings.night`, which become `ctx.settings`). `given`
    names the flags this invocation's command line set: on a resume each must agree with the
    night's value unless named in `overrides`."""
    root = ctx.project_root
    repo = gitops.open_repo(root)
    state_dir = root / ctx.settings.nightly.state_dir
    gitops.ignore_state_dir(state_dir)
    if overrides and not resume:
        raise InputError("--override changes a night being resumed", field="--override",
                         fix="add --resume, or drop --override")
    overrides = override_names(overrides)
    requested = night_values(ctx.settings.values, {"suite": suite_names, "merge": merge, "base": base_ref,
                                            "date": day.isoformat() if day else None, **limits_values(limits)})
    identity = repository_identity(repo)
    with repository_lock(ctx.store, state_dir / "nightly.lock", identity, "optimizer nightly", ctx.log):
        result, values = _resume(ctx, repo, identity, requested, given, overrides) if resume else (None, requested)
        limits, merge = limits_of(values), values["merge"]
        base = gitops.Base(ref=result.base_ref, commit=result.base_commit) if result else \
            gitops.resolve_base(repo, base_ref)
        names, agents = check_night(ctx, repo, base, values["suite"], limits, merge)
        stray = gitops.remove_stray_worktrees(repo, state_dir / "worktrees") + remove_stray_boxes(state_dir / "boxes")
        if stray:
            ctx.log(f"removed {len(stray)} proposer folder(s) left by an earlier process")
        if result is None:
            result = _start(ctx, repo, base, identity, {**values, "suite": list(names), "base": base.ref,
                                                        "date": (day or Date.today()).isoformat()})
        else:
            _reopen(ctx, repo, result)
        result.suites, result.merge = list(names), merge
        _work(ctx, repo, result, limits, names, agents)
        return result


def _reopen(ctx: LoopContext, repo, result: NightlyResult) -> None:
    """A resumed night runs again, on its branch (made again if the kill came before it was)."""
    result.resumed += 1
    result.status = "running"
    if not gitops.branch_exists(repo, result.branch):  # killed before the branch was made
        repo.create_head(result.branch, result.tip_commit)
    ctx.log(f"resuming nightly {result.nightly_id} on {result.branch}: {len(result.iterations)} "
            f"iteration(s) done")


def _work(ctx: LoopContext, repo, result: NightlyResult, limits: NightlyLimits, names: list[str],
          agents: list[str]) -> None:
    """The night's iterations under its ledger (spending carried over from earlier processes),
    then the merge. The state is saved before and after; an error saves it as crashed, while a
    kill or Ctrl-C leaves it as it was, to be resumed."""
    ledger = Ledger(ctx.store, budget=limits.budget, prices=dict(ctx.settings.nightly.model_prices),
                    scope={"nightly_id": result.nightly_id})
    ledger.spent_usd, ledger.spent_tokens = ctx.store.ledger.total(nightly_id=result.nightly_id)
    try:
        if result.current:
            _reconcile(ctx, repo, result)
        _save(ctx, result, ledger)
        with charging(ledger):
            _watch(ctx, repo, result, names, agents, ledger)
            _iterate(ctx, repo, result, limits, names, agents, ledger)
    except BaseException as exc:
        if isinstance(exc, Exception):  # a kill or Ctrl-C leaves the night resumable as it is
            result.status, result.stop_reason = "crashed", f"{type(exc).__name__}: {exc}"
            _save(ctx, result, ledger)
        raise
    if result.merge:
        _merge(repo, result, ctx)
    result.status = "finished"
    _save(ctx, result, ledger)


def _start(ctx: LoopContext, repo, base: gitops.Base, identity: str, values: dict[str, Any]) -> NightlyResult:
    """A new night: its record, with every value it runs with, and its branch at the base. An
    unfinished night of this checkout is marked `abandoned` first, so `--resume` never goes back
    to it after this one (its branch stays)."""
    for row in left_here(ctx.store.nightlies.rows(), repo, identity, ctx.project_root):
        ctx.store.nightlies.save(row["nightly_id"], "abandoned", row["tip_commit"], row["state"])
        ctx.log(f"nightly {row['nightly_id']} ({row['status']}, on {row['branch']}) was not resumed: marked abandoned")
    branch = branch_name(Date.fromisoformat(values["date"]), repo)
    result = NightlyResult(nightly_id=new_run_id(), branch=branch, base_ref=base.ref, base_commit=base.commit,
                           tip_commit=base.commit, suites=values["suite"], merge=values["merge"])
    ctx.store.nightlies.start(result.nightly_id, branch=branch, base_ref=base.ref, base_commit=base.commit,
                              settings=owned(values, identity, ctx.project_root), state=result.as_dict())
    repo.create_head(branch, base.commit)
    ctx.log(f"nightly {result.nightly_id}: branch {branch} at {base.commit[:12]} ({base.ref})")
    return result


def _resume(ctx: LoopContext, repo, identity: str, requested: dict[str, Any], given: Collection[str],
            overrides: Collection[str]) -> tuple[NightlyResult, dict[str, Any]]:
    """The night to resume and the values it goes on with, saved back (with its overrides)."""
    record = resumable(ctx.store.nightlies.rows(), repo, identity, ctx.project_root)
    check_witness(ctx.store, _state_dir(ctx), record, ctx.log)
    values = restore(stored_values(record), requested, given=given, overrides=overrides, log=ctx.log)
    ctx.settings = parts_of(values, ctx.project_root)
    ctx.store.nightlies.save_settings(record["nightly_id"], owned(values, identity, ctx.project_root))
    return NightlyResult.from_record(record), values


def _reconcile(ctx: LoopContext, repo, result: NightlyResult) -> None:
    """Settle the iteration a killed process was in: finish its bookkeeping if it had decided,
    otherwise clear what it left so that it runs again."""
    current = result.current
    iteration_id = current["iteration_id"]
    record = ctx.store.iterations.get(iteration_id)
    proposals = ctx.store.proposals.rows(iteration_id=iteration_id)
    expected = ((record or {}).get("settings") or {}).get("candidates", 1)
    status = (record or {}).get("status")
    if status in ("running", "interrupted", "stopped", "crashed") and proposals and len(proposals) >= expected:
        status = "accepted" if any(p["status"] == "accepted" for p in proposals) else "rejected"
        ctx.store.iterations.finish(iteration_id, status)
    if status not in VERDICTS:
        deleted = gitops.delete_branches(repo, f"optimizer/{iteration_id}/")
        if record is not None:
            ctx.store.iterations.finish(iteration_id, "interrupted")
        result.interrupted.append(iteration_id)
        ctx.log(f"iteration {current['number']} was interrupted; it runs again"
                + (f" (removed {', '.join(deleted)})" if deleted else ""))
        result.current = None
        return
    row, accepted = iteration_row(ctx.store, current["number"], iteration_id, status, current.get("agent"))
    _settle(ctx, repo, result, row, accepted)
    result.iterations.append(row)
    result.current = None
    ctx.log(f"iteration {current['number']} had finished ({status}) before the interruption")


def _settle(ctx: LoopContext, repo, result: NightlyResult, row: dict[str, Any], accepted: dict | None) -> bool:
    """Act on a finished iteration's accepted proposal: stack it on the nightly branch (True), or,
    in a merging night, when the gate's verdict is `propose` (some harm group still open and
    leaning toward a drop, `gate.rules.verdict_of`), keep it on its own branch for a reviewer with
    its pull-request body, and leave the nightly branch where it was (the row's status becomes
    `proposed`). Safe to repeat (a resumed night settles the iteration it was killed after)."""
    if not accepted:
        return False
    if result.merge and row.get("verdict") == "propose":
        row["status"], row["review_branch"] = "proposed", accepted["branch"]
        row["review_body"] = _review_body(ctx, accepted)
        ctx.log(f"proposed for review, not merged: {accepted['branch']} ({row['reason']}); pull-request body in "
                f"{row['review_body']}")
        return False
    _advance(repo, result, accepted["commit_sha"], accepted["branch"])
    return True


def _review_body(ctx: LoopContext, proposal: dict) -> str:
    """Write the proposal's markdown review (`optimizer review --format markdown`) under the
    state folder; its path, relative to the project when the state folder is inside it."""
    from optimizer.reporting.review import review
    from optimizer.reporting.review_markdown import render_markdown

    path = _state_dir(ctx) / "review" / f"{proposal['iteration_id']}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(review(ctx.store, ctx.project_root, ctx.settings.state_dir, proposal["branch"])),
                    encoding="utf-8")
    return str(path.relative_to(ctx.project_root) if path.is_relative_to(ctx.project_root) else path)


def _advance(repo, result: NightlyResult, commit: str, proposal_branch: str) -> None:
    """Fast-forward the nightly branch to an accepted commit (its parent is the tip) and drop the
    proposal branch; safe to repeat."""
    if repo.heads[result.branch].commit.hexsha != commit:
        repo.heads[result.branch].commit = commit
    gitops.delete_branch(repo, proposal_branch)
    result.tip_commit = commit


def _iterate(ctx: LoopContext, repo, result: NightlyResult, limits: NightlyLimits, names: list[str],
             agents: list[str], ledger: Ledger) -> None:
    rejections = 0
    for row in reversed(result.iterations):
        if row["status"] not in ("rejected", "proposed"):
            break
        rejections += 1
    resting: set[str] = set()
    """Agents with nothing to try at the current tip."""
    turn = len(result.iterations)
    while True:
        candidates = [agent for agent in agents if agent not in resting]
        result.stop_reason = _stop_reason(result, limits, rejections, candidates)
        if result.stop_reason:
            return
        agent = None
        if limits.order == "alternate":
            agent = candidates[turn % len(candidates)]
            turn += 1
        number = len(result.iterations) + 1
        result.current = {"number": number, "iteration_id": new_run_id(), "agent": agent}
        _save(ctx, result, ledger)
        ctx.log(f"nightly iteration {number} ({agent or 'worst-first'}) on {result.branch} "
                f"at {result.tip_commit[:12]}")
        try:
            iteration = run_iteration(ctx, suite_names=names, base_ref=result.branch, agent=agent,
                                      iteration_id=result.current["iteration_id"],
                                      night_decisions=decisions(ctx.store, result),
                                      night=night_scope(ctx.store, result.nightly_id, _finished(result),
                                                        result.current["iteration_id"]))
        except BudgetExceeded as exc:
            gitops.delete_branches(repo, f"optimizer/{result.current['iteration_id']}/")
            result.iterations.append({"number": number, "iteration_id": result.current["iteration_id"],
                                      "agent": agent, "status": "budget_exhausted", "reason": str(exc)})
            result.current = None
            result.stop_reason = f"budget: {exc}"
            ctx.log(f"stopping: {exc}")
            return
        row, accepted = iteration_row(ctx.store, number, iteration.iteration_id, iteration.status, agent)
        if _settle(ctx, repo, result, row, accepted):
            rejections = 0
            resting.clear()
            ctx.log(f"nightly iteration {number}: accepted, {result.branch} now at {accepted['commit_sha'][:12]}")
        elif row["status"] == "proposed":
            rejections += 1
            ctx.log(f"nightly iteration {number}: proposed for review, not merged ({rejections} in a row without "
                    f"a merge)")
        elif iteration.status == "nothing_to_fix":
            resting.update([agent] if agent else agents)
        else:
            rejections += 1
            ctx.log(f"nightly iteration {number}: {iteration.status} ({rejections} in a row)")
        result.iterations.append(row)
        result.current = None
        _save(ctx, result, ledger)


def _stop_reason(result: NightlyResult, limits: NightlyLimits, rejections: int, candidates: list[str]) -> str:
    """Why the night stops before another iteration, or the empty string."""
    if len(result.iterations) >= limits.max_iterations:
        return f"max_iterations ({limits.max_iterations})"
    if limits.time_limit_s is not None and time.time() - result.started_epoch >= limits.time_limit_s:
        return f"time limit ({limits.time_limit_s:.0f} s)"
    if rejections >= limits.patience:
        return f"{rejections} consecutive rejected iterations"
    return "" if candidates else "nothing left to try at the current prompt"


def _finished(result: NightlyResult) -> list[str]:
    """The night's iterations that ended, interrupted ones and the watch's included."""
    return ended_iterations(result.as_dict())


def _watch(ctx: LoopContext, repo, result: NightlyResult, names: list[str], agents: list[str],
           ledger: Ledger) -> None:
    """A merging night's watch of the patches merged before it (`optimizer.nightly.watch`), before its
    iterations: the state goes on from the newest earlier night of this base branch that ran one,
    and a patch shown harmful is reverted by a commit on the night's branch. Once per night (a
    resumed night whose watch ended does not run it again)."""
    settings = ctx.settings.nightly
    if not result.merge or not settings.watch_rounds or result.watch is not None:
        return
    earlier = [row for row in ctx.store.nightlies.rows() if row["nightly_id"] != result.nightly_id
               and row.get("base_ref") == result.base_ref and (row.get("state") or {}).get("watch") is not None]
    known = {item["commit"]: Watched.from_dict(item) for item in (earlier[-1]["state"]["watch"] if earlier else [])}
    paths = {agent: gitops.relative(repo, ctx.project_root / get_agent(agent).prompt_file) for agent in agents}
    entries = [known.get(patch.commit, patch) for patch in patches_in(repo, result.tip_commit, paths)]
    watching = [entry for entry in entries if entry.status == "watching"]
    if result.watch_iteration:  # a killed process's watch: its pairs run again, at the same indexes
        ctx.store.iterations.finish(result.watch_iteration, "interrupted")
        result.interrupted.append(result.watch_iteration)
    if watching:
        result.watch_iteration = new_run_id()
        _save(ctx, result, ledger)
        ctx.log(f"watch: {len(watching)} merged patch(es) compared with the prompt without them")
        run_iteration(ctx, suite_names=names, base_ref=result.branch, iteration_id=result.watch_iteration,
                      night=night_scope(ctx.store, result.nightly_id, _finished(result), result.watch_iteration),
                      watch=WatchNight(watching, settings.watch_rounds, settings.watch_nights))
    for entry in watching:
        if entry.status == "revert":
            _revert(ctx, repo, result, entry, paths[entry.agent])
    result.watch = [entry.as_dict() for entry in entries]
    _save(ctx, result, ledger)


def _revert(ctx: LoopContext, repo, result: NightlyResult, entry: Watched, path: str) -> None:
    """Take a patch shown harmful out of the prompt at the branch's tip, by a commit that carries
    the evidence; left in place (and said) when it no longer comes out cleanly."""
    text = without_patch(repo, result.tip_commit, entry.commit, path)
    if text is None:
        entry.status, entry.reason = "ended", f"shown harmful, but no longer comes out cleanly: {entry.reason}"
        ctx.log(f"watch: cannot revert {entry.commit[:12]}: {entry.reason}")
        return
    tree = gitops.tree_with(repo, result.tip_commit, path, text)
    commit = gitops.commit_change(repo, result.branch, result.tip_commit, tree,
                                  revert_message(entry, result.nightly_id))
    result.tip_commit = commit
    result.reverts.append(commit)
    entry.status = "reverted"
    ctx.log(f"watch: reverted {entry.headline} ({entry.commit[:12]}) by {commit[:12]}: {entry.reason}")


def decisions(store, result: NightlyResult) -> int:
    """The candidates the night's ended iterations put to the gate, read from the store (a
    resumed night counts what its killed process decided, in an iteration it ran again too):
    each spent its share of `night_alpha`."""
    return sum(1 for iteration_id in _finished(result)
               for proposal in store.proposals.rows(iteration_id=iteration_id) if proposal.get("decision"))


def _merge(repo, result: NightlyResult, ctx: LoopContext) -> None:
    if not result.accepted and not result.reverts:
        ctx.log("nothing to merge: no patch was accepted or reverted")
        return
    if any(row["gate"] != "strict" for row in result.accepted):
        ctx.log("not merging: a commit on the branch did not pass the strict gate")
        return
    gitops.merge_branch(repo, result.branch,
                        f"Merge {result.branch} (optimizer nightly, {len(result.accepted)} accepted patch(es)"
                        f"{f', {len(result.reverts)} revert(s)' if result.reverts else ''})",
                        fix="commit or stash your changes to the prompt files, then merge the branch by hand")
    result.merged = True
    ctx.log(f"merged {result.branch} into {result.base_ref}")


def _save(ctx: LoopContext, result: NightlyResult, ledger: Ledger) -> None:
    """The night's state in the store, and its witness in the state folder (`optimizer.nightly.witness`)."""
    result.spent_usd, result.spent_tokens = ledger.spent_usd, ledger.spent_tokens
    ctx.store.nightlies.save(result.nightly_id, result.status, result.tip_commit, result.as_dict())
    record = ctx.store.nightlies.get(result.nightly_id) or {}
    write_witness(ctx.store, _state_dir(ctx), result.nightly_id, _finished(result), record.get("settings") or {})


def _state_dir(ctx: LoopContext) -> Path:
    return ctx.project_root / ctx.settings.loop.state_dir


