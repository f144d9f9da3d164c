"""`optimizer review`: what a reviewer needs to decide on a proposal branch, and `--merge`.

The record is gathered here once (`review`) and laid out by its readers: the console table in
`optimizer.cli.review`, and `render_markdown` for a pull request's body or comment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optimizer import gitops
from optimizer.errors import InputError
from optimizer.files import shown_path

MARKDOWN_LIMIT = 60_000
"""Characters of a markdown review at most: GitHub refuses a pull request body or comment past
65,536, so a longer diff is cut, with a note saying how to see all of it."""

DIFF_OPEN_LINES = 40
"""A diff longer than this goes in a collapsed <details> block, so the gate's table stays in view."""


@dataclass(frozen=True)
class Review:
    proposal: dict[str, Any]
    iteration: dict[str, Any]
    diff: str
    diff_source: str
    """Where the diff comes from: the `git diff` command that made it, or why the recorded one is shown."""
    rerun_cost: float
    """The candidate run's agent and judge cost (the patcher's is in `proposal['usage']`)."""
    judges: list[dict[str, Any]]
    merged: bool | None = None
    """With `--merge`: True when merged now, False when the base held it already."""
    request: str | None = None
    """The request's path as a pull request shows it: in the repository or the state folder (`files.shown_path`)."""
    report: str | None = None
    """The iteration's `report.md`, shown likewise."""

    @property
    def git_diff(self) -> str:
        return f"git diff {self.iteration['base_commit'][:12]}..{self.proposal['branch']}"

    @property
    def cost_line(self) -> str:
        usage = self.proposal["usage"]
        tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
        return (f"patcher ${usage.get('cost_usd', 0.0):.4f} ({tokens:,} tokens), "
                f"rerun ${self.rerun_cost:.4f} over {self.proposal['rollouts']} rollouts")


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


def review(store, root: Path, state_dir: str, branch: str | None, *, merge: bool = False) -> Review:
    """The proposal's record in `store` (default: the latest accepted one); with `merge`, merged
    into its base branch (which must be checked out). `state_dir`: the setting, under `root`."""
    proposal = find_proposal(store, branch)
    repo = gitops.open_repo(root)
    found = review_of(store, repo, proposal, root / state_dir)
    if merge:
        return Review(**{**found.__dict__, "merged": _merge(repo, proposal, found.iteration)})
    return found


def review_of(store, repo, proposal: dict, state_dir: Path) -> Review:
    """The review of one recorded proposal: its diff from its branch while it exists (else the
    recorded one), its iteration, the candidate run's cost and judges, paths as a PR shows them."""
    iteration = store.iterations.get(proposal["iteration_id"])
    if gitops.branch_exists(repo, proposal["branch"]):
        diff = repo.git.diff(f"{iteration['base_commit']}..{proposal['branch']}")
        source = f"$ git diff {iteration['base_commit'][:12]}..{proposal['branch']}"
    else:
        diff = proposal["diff"]
        why = ("accepted, then merged or stacked on its night's branch" if proposal["status"] == "accepted"
               else "the proposal was not accepted")
        source = f"(branch deleted: {why}; recorded diff)"
    candidate = store.runs.get(proposal["candidate_run_id"]) if proposal.get("candidate_run_id") else None
    summary = (candidate or {}).get("summary") or {}
    top = Path(repo.working_tree_dir)
    return Review(proposal=proposal, iteration=iteration, diff=diff, diff_source=source,
                  rerun_cost=summary.get("totals", {}).get("cost_usd", 0.0), judges=summary.get("judges") or [],
                  request=shown_path(iteration.get("request_path"), top, state_dir),
                  report=shown_path((iteration.get("summary") or {}).get("report"), top, state_dir))


@dataclass(frozen=True)
class NightReview:
    """A nightly job for one pull request: its record, each patch it accepted (stacked, or kept
    for a reviewer) with its review, and the watch's reverts."""

    night: dict[str, Any]
    """The night's row, its state decoded (`state`: iterations, reverts, spend, stop reason)."""
    patches: list[tuple[dict[str, Any], Review]]
    """(the night's row of the iteration, its accepted proposal's review), in the night's order."""
    reverts: list[tuple[str, str]]
    """(commit, its subject) of each revert the watch added."""

    @property
    def state(self) -> dict[str, Any]:
        return self.night.get("state") or {}


def review_night(store, root: Path, state_dir: str, nightly_id: str) -> NightReview:
    """The night `nightly_id` (`latest`: the last one started) in `store` as one review."""
    nights = store.nightlies.rows()
    if not nights:
        raise InputError("no nightly job recorded", field="--night", fix="run `optimizer nightly` first")
    night = nights[-1] if nightly_id == "latest" else next((n for n in nights if n["nightly_id"] == nightly_id), None)
    if night is None:
        raise InputError(f"no nightly job {nightly_id!r}", field="--night",
                         fix=f"pass `latest` or one of: {', '.join(n['nightly_id'] for n in nights[-5:])}")
    repo = gitops.open_repo(root)
    patches = []
    for row in (night.get("state") or {}).get("iterations") or []:
        if row.get("status") not in ("accepted", "proposed"):
            continue
        accepted = next((p for p in store.proposals.rows(iteration_id=row["iteration_id"])
                         if p["status"] == "accepted"), None)
        if accepted is not None:
            patches.append((row, review_of(store, repo, accepted, root / state_dir)))
    reverts = []
    for sha in (night.get("state") or {}).get("reverts") or []:
        try:
            reverts.append((sha, repo.commit(sha).summary))
        except ValueError:
            reverts.append((sha, "(commit not in this clone)"))
    return NightReview(night=night, patches=patches, reverts=reverts)


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


def changed_pairs_url(viewer: str, iteration_id: str) -> str:
    """The viewer's page of the pairs whose outcome the patch changed (docs/cli.md#review-as-markdown)."""
    return f"{viewer.rstrip('/')}/iterations/{iteration_id}/changed"
