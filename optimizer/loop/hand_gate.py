"""`optimizer gate`: every agent whose prompt a change edits, gated as a proposal (one iteration
each, `optimizer.loop.hand_edit`), and the result as one markdown review and a verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optimizer import gitops
from optimizer.errors import InputError
from optimizer.loop.hand_edit import HandEdit
from optimizer.loop.iteration import run_iteration
from optimizer.loop.records import IterationResult, LoopContext
from optimizer.registry import get_agent
from optimizer.suites import load_suites


@dataclass
class GateOutcome:
    base: gitops.Base
    head: str
    """The head commit's sha."""
    results: dict[str, IterationResult] = field(default_factory=dict)
    """Per edited agent, its iteration."""
    uncommitted: list[str] = field(default_factory=list)
    """Prompt files with changes the checkout holds but the head commit does not (not gated)."""

    @property
    def passed(self) -> bool:
        """Every edited agent's edit accepted (no edit at all passes: nothing changed)."""
        return all(result.accepted is not None for result in self.results.values())

    def verdict(self, agent: str) -> str:
        result = self.results[agent]
        if result.accepted is not None:
            return f"accepted: {result.accepted.reason.removeprefix('accepted: ')}"
        if result.status == "nothing_to_fix":
            return "not shown to improve anything: no train bucket of this agent fails at the base"
        reasons = "; ".join(record.reason for record in result.proposals) or result.status
        return f"rejected: {reasons.removeprefix('rejected: ')}"

    @property
    def lines(self) -> list[str]:
        """One line per edited agent for the console, and the overall verdict."""
        notes = [f"note: {path} has uncommitted changes, which are not gated: the gate measures the prompts "
                 f"as {self.head[:12]} holds them (commit the edit, or pass --head)" for path in self.uncommitted]
        if not self.results:
            return notes + [f"no prompt file differs between {self.base.ref} and {self.head[:12]}: nothing to gate"]
        return notes + [f"{agent}: {self.verdict(agent)}" for agent in self.results] + [
            f"gate: {'passed' if self.passed else 'FAILED'}"]

    def as_dict(self) -> dict[str, Any]:
        return {"base": self.base.commit, "head": self.head, "passed": self.passed,
                "agents": {agent: {"iteration_id": result.iteration_id, "status": result.status,
                                   "verdict": self.verdict(agent)} for agent, result in self.results.items()}}


def prompt_paths(ctx: LoopContext, repo, suites) -> dict[str, str]:
    """Per agent of `suites`, its prompt file's path in the repository."""
    return {name: gitops.relative(repo, ctx.project_root / get_agent(name).prompt_file)
            for name in sorted({suite.spec.agent_name for suite in suites})}


def edited_agents(repo, paths: dict[str, str], base: gitops.Base, head: str) -> dict[str, tuple[str, str]]:
    """Per agent whose prompt file (`paths`) differs between `base` and `head`: (its path, the
    head's text)."""
    edited = {}
    for name, path in paths.items():
        try:
            after = gitops.read_at(repo, head, path)
        except KeyError:
            raise InputError(f"{path} is not in {head[:12]}", field="--head",
                             fix="a gated change edits the prompt files; it does not delete them") from None
        if after != gitops.read_at(repo, base.commit, path):
            edited[name] = (path, after)
    return edited


def gate_edits(ctx: LoopContext, *, base: str, head: str, targets: list[str], suite_names: list[str] | None
               ) -> GateOutcome:
    repo = gitops.open_repo(ctx.project_root)
    base_ref = gitops.resolve_base(repo, base)
    head_sha = gitops.resolve_base(repo, head, field="--head").commit
    wanted = _targets(targets)
    outcome = GateOutcome(base=base_ref, head=head_sha)
    suites = load_suites(suite_names or list(ctx.settings.loop.suites), ctx.project_root)
    paths = prompt_paths(ctx, repo, suites)
    edited = edited_agents(repo, paths, base_ref, head_sha)
    if head_sha == repo.head.commit.hexsha:
        outcome.uncommitted = sorted(path for path in paths.values() if gitops.uncommitted(repo, path))
    agent_of = {suite.name: suite.spec.agent_name for suite in suites}
    strays = [f"{s}/{b}" for s, b in wanted if agent_of.get(s) not in edited]
    if strays:
        raise InputError(f"--target {', '.join(strays)}: not a suite of an agent whose prompt the change edits "
                         f"({', '.join(edited) or 'none'})", field="--target",
                         fix="name buckets of the edited agents' suites as suite/bucket")
    buckets = {(suite.name, task.bucket) for suite in suites if suite.spec.kind == "capability"
               for task in suite.tasks if task.split == "train"}
    unknown = [f"{s}/{b}" for s, b in wanted if (s, b) not in buckets]
    if unknown:
        raise InputError(f"--target {', '.join(unknown)}: no train task of that suite is in that bucket",
                         field="--target", fix="name a bucket as suite/bucket: " + ", ".join(
                             sorted(f"{s}/{b}" for s, b in buckets if agent_of[s] in edited)))
    for agent, (path, text) in edited.items():
        ctx.log(f"{agent}: gating the edit of {path} ({head[:40]} at {head_sha[:12]}) against {base_ref.ref}")
        edit = HandEdit(agent=agent, text=text, source=f"{head} at {head_sha[:12]} against {base_ref.ref}",
                        targets=tuple(key for key in wanted if agent_of[key[0]] == agent))
        outcome.results[agent] = run_iteration(ctx, suite_names=suite_names, base_ref=base, agent=agent,
                                               hand_edit=edit)
    return outcome


def _targets(given: list[str]) -> list[tuple[str, str]]:
    found = []
    for text in given:
        suite, slash, bucket = text.partition("/")
        if not (slash and suite and bucket):
            raise InputError(f"--target {text!r} is not suite/bucket", field="--target",
                             fix="write it as the suite's name, a slash and the bucket, e.g. card_agent/template_event")
        found.append((suite, bucket))
    return found


def render_gate(ctx: LoopContext, outcome: GateOutcome, *, viewer: str | None) -> str:
    """The pull request comment: the verdict per edited agent, then each edit's review."""
    from optimizer.reporting.review import review_of
    from optimizer.reporting.review_markdown import render_markdown

    repo = gitops.open_repo(ctx.project_root)
    head = (f"## Prompt gate: {'passed' if outcome.passed else 'FAILED'}\n\n"
            f"The prompts at `{outcome.head[:12]}` against `{outcome.base.ref}` (`{outcome.base.commit[:12]}`).\n")
    if not outcome.results:
        return head + "\nNo prompt file differs: nothing to gate.\n"
    parts = [head, "\n".join(f"- **{agent}**: {outcome.verdict(agent)}" for agent in outcome.results) + "\n"]
    for result in outcome.results.values():
        proposals = ctx.store.proposals.rows(iteration_id=result.iteration_id)
        if proposals:
            review = review_of(ctx.store, repo, proposals[-1], ctx.project_root / ctx.settings.state_dir)
            parts.append(render_markdown(review, viewer=viewer, level=3))
    return "\n".join(parts)
