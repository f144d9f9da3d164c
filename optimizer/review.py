"""`optimizer review`: what a reviewer needs to decide on a proposal branch, and `--merge`."""

from __future__ import annotations

from pathlib import Path

from optimizer import gitops
from optimizer.config import Settings
from optimizer.errors import InputError


def find_proposal(store, branch: str | None) -> dict:
    proposals = store.proposals.rows(branch=branch) if branch else \
        [p for p in store.proposals.rows() if p["status"] == "accepted"]
    if not proposals:
        if branch:
            raise InputError(f"no proposal recorded for branch {branch!r}", field="BRANCH",
                             fix="list proposals with `optimizer history` or omit BRANCH for the latest accepted one")
        raise InputError("no accepted proposal yet", field="BRANCH",
                         fix="run `optimizer run` first, or name a (rejected) proposal branch to see its record")
    return proposals[-1]


def review(settings: Settings, root: Path, branch: str | None, *, merge: bool = False) -> dict:
    from optimizer.cli._common import console, print_judges, render_decision
    from optimizer.store import open_store

    store = open_store(settings, root)
    proposal = find_proposal(store, branch)
    iteration = next(i for i in store.iterations.rows() if i["iteration_id"] == proposal["iteration_id"])
    repo = gitops.open_repo(root)
    console.rule(f"{proposal['branch']}: {proposal['status']}")
    console.print(f"iteration {proposal['iteration_id']}, base {iteration['base_ref']} at "
                  f"{iteration['base_commit'][:12]}, targets {', '.join(iteration['targets'])}", highlight=False)
    if gitops.branch_exists(repo, proposal["branch"]):
        diff = repo.git.diff(f"{iteration['base_commit']}..{proposal['branch']}")
        console.print(f"$ git diff {iteration['base_commit'][:12]}..{proposal['branch']}", highlight=False)
    else:
        diff = proposal["diff"]
        why = ("accepted, then merged or stacked on its night's branch" if proposal["status"] == "accepted"
               else "the proposal was not accepted")
        console.print(f"(branch deleted: {why}; recorded diff)", highlight=False)
    console.print(diff.rstrip("\n") or "(no change)", markup=False, highlight=False)
    if proposal.get("decision"):
        console.print(render_decision(proposal["decision"]))
    else:
        console.print(f"not evaluated: {proposal['reason']}", markup=False, highlight=False)
    usage = proposal["usage"]
    candidate = store.runs.get(proposal["candidate_run_id"]) if proposal.get("candidate_run_id") else None
    agent_cost = (candidate or {}).get("summary", {}).get("totals", {}).get("cost_usd", 0.0) if candidate else 0.0
    console.print(f"cost: patcher ${usage.get('cost_usd', 0.0):.4f} ({usage.get('prompt_tokens', 0) + usage.get('completion_tokens', 0):,} tokens), "
                  f"rerun ${agent_cost:.4f} over {proposal['rollouts']} rollouts", highlight=False)
    print_judges((candidate or {}).get("summary", {}).get("judges") or [])
    summary = iteration.get("summary") or {}
    if summary.get("search"):
        _print_search(console, summary["search"])
    report = summary.get("report")
    console.print(f"request: {iteration.get('request_path')}\nreport: {report}", highlight=False)
    if merge:
        merged = _merge(repo, proposal, iteration)
        console.print(f"{'merged' if merged else 'already merged:'} {proposal['branch']} into {iteration['base_ref']}",
                      highlight=False)
    return proposal


def _print_search(console, search: dict) -> None:
    """The iteration's search: every candidate, its screening scores and why it was or was not
    promoted (the diffs are in the pool's candidates.json)."""
    candidates = search.get("candidates") or []
    promoted = sum(1 for c in candidates if c["status"] not in ("screened_out", "not_promoted", "rejected_check",
                                                                "no_patch", "unchanged"))
    console.print(f"search: {len(candidates)} candidate(s) screened in {search.get('rollouts', 0)} trials, "
                  f"{promoted} promoted to the gate; base prompt screened at {_score(search.get('base_score'))} "
                  f"(targets {_score(search.get('base_target_score'))}); pool {search.get('pool')}", highlight=False)
    for c in candidates:
        minibatch = (f"minibatch {sum(c['parent_minibatch']):.2f} -> {sum(c['minibatch']):.2f}, "
                     if c.get("minibatch") else "")
        console.print(f"  search candidate {c['number']}: {c['status']} ({minibatch}screening "
                      f"{_score(c.get('screen_score'))}, targets {_score(c.get('target_score'))}) {c['reason']}",
                      markup=False, highlight=False)


def _score(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _merge(repo, proposal: dict, iteration: dict) -> bool:
    """Merge an accepted proposal into its base branch; False when the base holds it already."""
    if proposal["status"] != "accepted":
        raise InputError(f"{proposal['branch']} was not accepted ({proposal['status']})", field="--merge",
                         fix="only accepted proposals can be merged")
    if not gitops.branch_exists(repo, proposal["branch"]):
        raise InputError(f"branch {proposal['branch']} no longer exists", field="BRANCH",
                         fix="it was merged or deleted already")
    gitops.require_checked_out(repo, iteration["base_ref"])
    if repo.is_ancestor(proposal["branch"], iteration["base_ref"]):
        return False
    gitops.merge_branch(repo, proposal["branch"], f"Merge {proposal['branch']} (optimizer, gate accepted)",
                        fix="commit or stash your changes to the prompt file, then retry")
    return True
