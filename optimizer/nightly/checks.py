"""The checks a night makes before it starts: its suites, its branch name, a budget that can bind."""

from __future__ import annotations

from datetime import date as Date

from optimizer import gitops
from optimizer.errors import InputError
from optimizer.ledger import Ledger
from optimizer.loop.iteration import proposer_can_run
from optimizer.loop.records import LoopContext
from optimizer.models import answered_in_process, is_embedded
from optimizer.nightly.results import NightlyLimits
from optimizer.registry import get_agent
from optimizer.settings.parts import NightlySettings
from optimizer.suites import load_suite, project_suites

def capability_suites(root) -> list[str]:
    """Every capability suite under `suites/`: by default the night works on all agents."""
    names = [folder for folder, data in project_suites(root) if data.get("kind", "capability") == "capability"]
    if not names:
        raise InputError("no capability suite under suites/", path=root / "suites",
                         fix="add suites/<name>/suite.json or pass --suite")
    return names


def branch_name(day: Date, repo) -> str:
    """`optimizer/nightly-<date>`, with `-2`, `-3`... when that name is taken here or on a remote
    this clone knows (a CI job run again the same day starts from a fresh clone, where the first
    run's branch is only a remote-tracking one; pushing the same name would be refused)."""
    name = f"optimizer/nightly-{day.isoformat()}"
    number = 1
    while gitops.branch_taken(repo, name if number == 1 else f"{name}-{number}"):
        number += 1
    return name if number == 1 else f"{name}-{number}"


def check_night(ctx: LoopContext, repo, base: gitops.Base, suites: list[str] | None, limits: NightlyLimits,
                merge: bool) -> tuple[list[str], list[str]]:
    """The night's suites and agents, after the checks that can refuse it before anything is
    created: a merge needs the base branch checked out and the strict gate, every agent must be
    registered, a USD budget must be able to bind, and the proposer must be able to run."""
    root = ctx.project_root
    if merge:
        gitops.require_checked_out(repo, base.ref)
    if merge and ctx.settings.nightly.gate != "strict":
        raise InputError("--merge needs the strict gate", field="--merge",
                         fix="unset the gate setting (OPTIMIZER_GATE, or gate in the settings file) for the "
                             "strict gate, or merge by hand after review")
    names = suites or capability_suites(root)
    agents = sorted({load_suite(name, root).spec.agent_name for name in names})
    for agent in agents:
        get_agent(agent)
    check_budget_can_bind(ctx.settings.nightly, limits)
    proposer_can_run(ctx.settings.loop.proposal)
    return names, agents


def check_budget_can_bind(settings: NightlySettings, limits: NightlyLimits) -> None:
    """A USD budget counts dollars, and a model without a price spends none on paper: refuse a
    budget that such a model could overrun unnoticed."""
    if limits.budget.usd is None:
        return
    ledger = Ledger(None, prices=dict(settings.model_prices))
    models = settings.models
    roles = {"agent_model": models.agent_model, "judge_model": models.judge_model}
    if settings.proposer == "llm":
        roles["patcher_model"] = models.patcher_model
    free = {model for model in roles.values() if answered_in_process(model) or is_embedded(model)}
    unpriced = [f"{role} {model}" for role, model in roles.items() if model not in free and not ledger.has_price(model)]
    if unpriced:
        raise InputError(f"--budget-usd cannot limit {', '.join(unpriced)}: litellm has no price for it",
                         field="model_prices",
                         fix='give its price per million tokens, e.g. model_prices = {"<model>": [0.4, 1.6]}, '
                         "or use --budget-tokens")
