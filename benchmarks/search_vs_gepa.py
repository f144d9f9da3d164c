"""Search + gate against plain gepa and the one-candidate loop, at equal rollout budgets, on the
noisy simulator with the weak patcher. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/search_vs_gepa.py [--budget 2000] [--skill 0.3] [--search-rollouts 120]
        [--targets 4] [--seed 0] [--arms search gepa loop] [--verbose]

Every arm runs the Card Agent on `mock/sim` with `sim_noise = "independent"` through the real
runner, and gets its patches from the weak `mock/patcher` (`mock_patcher_skill`: the right rule
with that probability, else a useless distractor or the rule plus a contradiction of another
bucket), asked with our `request.md`:

* **search**: `optimizer run` iterations with `search_rollouts` set and `--targets` failing
  buckets at once (gepa's search over the targets, then the gate on fresh trials for the best one
  or two), each accepted branch merged before the next iteration, until the budget is spent;
* **gepa**: `gepa.optimize` with its defaults (Pareto selection, minibatch of 3, strict
  improvement on the minibatch sum, the trainset as valset) over the same runner and patcher; its
  best candidate is the final prompt, and the steps of that candidate's lineage are its
  accepted changes;
* **loop**: `optimizer run` iterations with one candidate for one bucket straight to the gate
  (the loop without a search).

`--verbose` prints each iteration (targets, rollouts by stage, the verdict) and each candidate
the search kept, with what it truly is by the simulator's rules.

Scores are the simulator's ground truth, not a noisy estimate: a task's expected pass rate under
the final prompt (`SimProfile.pass_probability`), averaged over the train tasks and over the
holdout tasks. "Rules gained" counts the simulator's rules the final prompt states that the base
prompt did not (an accepted patch may state several). An accepted change is *harmful* when some
task's pass rate falls under it, and *useless* when none rises. "Gap closed" is the train score's
rise as a share of the distance from the base prompt to the sim's ceiling (every rule stated).
Rollouts count every trial the arm ran,
cache-served ones included; "model calls" counts those that called the model (in the loop arms
the response cache serves, for instance, the part of a new baseline that the accepted candidate
already ran with the same prompt, seed and trial index; gepa's arm runs without the cache).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from loop_efficiency import PROMPT, make_repo  # noqa: E402

AGENT = "card_agent"


@dataclass
class Arm:
    name: str
    prompt: str = ""
    rollouts: int = 0
    model_rollouts: int = 0
    """Rollouts that called the model (the others were served by the response cache)."""
    changes: list[str] = field(default_factory=list)
    """Per accepted change: good | useless | harmful."""
    notes: str = ""


# ---------------------------------------------------------------- ground truth
class Truth:
    def __init__(self, suites):
        from optimizer.registry import get_agent

        self.profile = get_agent(AGENT).sim_profile
        self.tasks = [task for suite in suites for task in suite.tasks]

    def rates(self, prompt: str) -> list[float]:
        return [self.profile.pass_probability(task, prompt) for task in self.tasks]

    def score(self, prompt: str, split: str) -> float:
        values = [rate for task, rate in zip(self.tasks, self.rates(prompt)) if task.split == split]
        return sum(values) / len(values)

    def kind(self, before: str, after: str) -> str:
        pairs = list(zip(self.rates(before), self.rates(after)))
        if any(new < old - 1e-9 for old, new in pairs):
            return "harmful"
        return "good" if any(new > old + 1e-9 for old, new in pairs) else "useless"

    def stated(self, prompt: str) -> int:
        """How many of the simulator's rules the prompt states."""
        return sum(rule.status(prompt) == "stated" for rule in self.profile.rules.values())

    def ceiling(self, base: str) -> str:
        texts = self.profile.rule_texts
        return base.rstrip("\n") + "\n" + "\n".join(f"- {rule}" for rule in texts.rules.values()) + "\n"


# ---------------------------------------------------------------- arms (a) and (c): the loop
def loop_arm(name: str, budget: int, env: dict[str, str], truth: Truth, log) -> Arm:
    from optimizer import gitops
    from optimizer.cli._common import console
    from optimizer.settings.loading import load_settings
    from optimizer.loop.iteration import LoopContext, run_iteration
    from optimizer.reporting.review import review
    from optimizer.proposal.diffs import size as changed_lines
    from optimizer.store import open_store

    arm = Arm(name)
    console.quiet = True  # `review --merge` prints the whole record
    with tempfile.TemporaryDirectory() as folder:
        repo = make_repo(Path(folder))
        os.environ.update({**env, "OPTIMIZER_ROOT": str(repo), "OPTIMIZER_STATE_DIR": str(Path(folder) / "state")})
        settings = load_settings(repo)
        store = open_store(settings, repo)
        ctx = LoopContext(settings=settings.parts, project_root=repo, store=store, log=lambda message: None)
        git = gitops.open_repo(repo)
        screened: set[tuple[str, int]] = set()
        gated = iterations = 0
        while arm.rollouts < budget:
            before = (repo / PROMPT).read_text(encoding="utf-8")
            result = run_iteration(ctx)
            iterations += 1
            arm.rollouts += result.rollouts
            arm.model_rollouts += result.model_rollouts
            if result.search:  # a continued pool lists its earlier candidates again
                screened |= {(str(result.search.folder), c.number) for c in result.search.candidates}
            gated += sum(1 for p in result.proposals if p.decision is not None)
            if result.status == "accepted":
                review(store, repo, settings.state_dir, result.accepted.branch, merge=True)
                after = gitops.read_at(git, "HEAD", PROMPT)
                arm.changes.append(truth.kind(before, after))
            targets = ", ".join(t.bucket for t in result.selection.targets) if result.selection else "-"
            gates = ", ".join(str(p.decision.rollouts) for p in result.proposals if p.decision is not None)
            log(f"  {name} iteration {iterations}: {result.status}"
                f"{' (' + arm.changes[-1] + ')' if result.status == 'accepted' else ''}, targets {targets}; "
                f"{result.rollouts} rollouts ({result.model_rollouts} model calls; screening "
                f"{result.screen_rollouts}, gate {gates or '-'}); {arm.rollouts} in all; "
                f"skipped {result.skipped or '-'}")
            for candidate in result.search.candidates if result.search else []:
                if candidate.text and candidate.status not in ("screened_out", "rejected_check", "unchanged"):
                    broken = [b for b, rule in truth.profile.rules.items()
                              if rule.status(candidate.text) == "contradicted"]
                    contradicts = f" (contradicts {', '.join(broken)})" if broken else ""
                    log(f"    candidate {candidate.number}: {candidate.status}, truly "
                        f"{truth.kind(before, candidate.text)}{contradicts}"
                        f", {changed_lines(candidate.diff)} changed lines"
                        f"{'; gated on ' + ', '.join(candidate.gate_targets) if candidate.gate_targets else ''}"
                        f"; {candidate.reason[:120]}")
                    proposal = next((p for p in result.proposals if candidate.branch and p.branch == candidate.branch
                                     and p.decision is not None), None)
                    for row in proposal.decision.buckets if proposal and broken else []:
                        if row.bucket in broken:
                            log(f"      gate on {row.bucket} ({row.kind}): {row.before:.2f} -> {row.after:.2f}, "
                                f"{row.pairs} pairs, p_harm {row.p_harm:.3f}, {row.verdict}")
            if result.status == "nothing_to_fix":
                break
        arm.prompt = (repo / PROMPT).read_text(encoding="utf-8")
        arm.notes = f"{iterations} iterations, {len(screened)} candidates screened, {gated} gated"
        for key in list(os.environ):
            if key.startswith("OPTIMIZER_") and key not in saved_env:
                del os.environ[key]
    return arm


saved_env = set(os.environ)


# ---------------------------------------------------------------- arm (b): plain gepa
def gepa_arm(budget: int, skill: float, seed: int, truth: Truth, log) -> Arm:
    from optimizer.proposal import gepa_adapter
    from optimizer.settings.config import Settings
    from optimizer.proposal.llm import LLMProposer
    from optimizer.proposal.proposers import ProposalRequest
    from optimizer.proposal.request import failure_records, load_manual, render_request, select_targets
    from optimizer.trials.runner import Runner, plan
    from optimizer.proposal.screening import COMPONENT, Example, ScreeningAdapter
    from optimizer.store import Store
    from optimizer.suites import load_suites

    arm = Arm("gepa")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        settings = Settings(agent_model="mock/sim", judge_model="mock/sim", sim_noise="independent", seed=seed,
                            concurrency=8, cache=False)
        store = Store(f"sqlite:///{work}/gepa.db")
        suites = load_suites([AGENT], ROOT)
        items = {(item.suite.name, item.task.id): item for item in plan(suites, trials=1)
                 if item.task.split == "train"}

        def run(planned, prompt, label):
            prompt_root = work / "prompt"
            (prompt_root / PROMPT).parent.mkdir(parents=True, exist_ok=True)
            (prompt_root / PROMPT).write_text(prompt, encoding="utf-8")
            return Runner(settings.runner, store, project_root=ROOT, prompt_root=prompt_root).run(
                suites, planned, kind="screen").trials

        adapter = ScreeningAdapter(items, run, targets=set(), failures=lambda trials: trials)
        base = (ROOT / PROMPT).read_text(encoding="utf-8")
        manual = load_manual(ROOT, AGENT)
        patcher = LLMProposer("mock/patcher", skill=skill, seed=seed, patch_format="edits", retry_attempts=1)
        count = [0]

        def propose(candidate, reflective_dataset, components):
            trials = list(reflective_dataset[COMPONENT])
            selection = select_targets(trials, suites)
            if selection is None:
                return {}
            failures = failure_records(trials, suites, selection)
            request, _ = render_request(selection=selection, failures=failures, prompt=candidate[COMPONENT],
                                        prompt_file=PROMPT, manual=manual, iteration_id="gepa", base_commit="-",
                                        agent_model="mock/sim", max_changed_lines=40, token_budget=12000)
            count[0] += 1
            workdir = work / f"proposal-{count[0]}"
            (workdir / PROMPT).parent.mkdir(parents=True, exist_ok=True)
            (workdir / PROMPT).write_text(candidate[COMPONENT], encoding="utf-8")
            (workdir / "request.md").write_text(request, encoding="utf-8")
            proposal = patcher.propose(ProposalRequest(request=request, request_path=workdir / "request.md",
                                                       prompt_file=PROMPT, workdir=workdir, ordinal=count[0]))
            patched = (workdir / PROMPT).read_text(encoding="utf-8")
            return {} if proposal.error or patched == candidate[COMPONENT] else {COMPONENT: patched}

        train = [Example(*key) for key in sorted(items)]
        result = gepa_adapter.optimize(seed_candidate={COMPONENT: base}, trainset=train, adapter=adapter,
                                       custom_candidate_proposer=propose, max_metric_calls=budget, seed=seed,
                                       logger=_Quiet(), display_progress_bar=False)
        best = result.best_idx
        lineage = []
        while best is not None and best != 0:
            lineage.append(best)
            best = next((p for p in result.parents[best] if p is not None), None)
        for index in reversed(lineage):
            parent = next(p for p in result.parents[index] if p is not None)
            arm.changes.append(truth.kind(result.candidates[parent][COMPONENT], result.candidates[index][COMPONENT]))
        pool = [truth.kind(result.candidates[next(p for p in parents if p is not None)][COMPONENT],
                           candidate[COMPONENT])
                for candidate, parents in zip(result.candidates[1:], result.parents[1:])]
        arm.prompt = result.best_candidate[COMPONENT]
        arm.rollouts = arm.model_rollouts = adapter.rollouts  # the response cache is off here
        arm.notes = (f"{count[0]} proposals, {len(result.candidates) - 1} accepted into the pool "
                     f"({pool.count('harmful')} harmful, {pool.count('useless')} useless)")
    return arm


class _Quiet:
    def log(self, message: str) -> None:
        pass


# ---------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=2000, help="rollouts per arm")
    parser.add_argument("--skill", type=float, default=0.3, help="the weak patcher's mock_patcher_skill")
    parser.add_argument("--search-rollouts", type=int, default=120, help="screening budget per iteration (search arm)")
    parser.add_argument("--targets", type=int, default=4, help="target_buckets per iteration (search arm)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", nargs="*", default=["search", "gepa", "loop"])
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    log = print if args.verbose else (lambda message: None)

    from optimizer.suites import load_suites

    truth = Truth(load_suites([AGENT], ROOT))
    base = (ROOT / PROMPT).read_text(encoding="utf-8")
    ceiling = truth.ceiling(base)
    env = {"OPTIMIZER_AGENT_MODEL": "mock/sim", "OPTIMIZER_PATCHER_MODEL": "mock/patcher",
           "OPTIMIZER_MOCK_PATCHER_SKILL": str(args.skill), "OPTIMIZER_SIM_NOISE": "independent",
           "OPTIMIZER_SEED": str(args.seed), "OPTIMIZER_PATCH_FORMAT": "edits", "OPTIMIZER_CONCURRENCY": "8"}
    arms = []
    started = time.monotonic()
    for name in args.arms:
        began = time.monotonic()
        if name == "search":
            arm = loop_arm("search", args.budget, {**env, "OPTIMIZER_SEARCH_ROLLOUTS": str(args.search_rollouts),
                                                   "OPTIMIZER_CANDIDATES": "2",
                                                   "OPTIMIZER_TARGET_BUCKETS": str(args.targets)}, truth, log)
        elif name == "loop":
            arm = loop_arm("loop", args.budget, {**env, "OPTIMIZER_SEARCH_ROLLOUTS": "0"}, truth, log)
        else:
            arm = gepa_arm(args.budget, args.skill, args.seed, truth, log)
        arm.notes += f"; {time.monotonic() - began:.0f} s"
        arms.append(arm)
    top = truth.score(ceiling, "train")
    print(f"card_agent on mock/sim (independent noise), weak patcher skill {args.skill}, budget {args.budget} "
          f"rollouts per arm, seed {args.seed}; search arm: {args.search_rollouts} screening trials, "
          f"{args.targets} target buckets per iteration")
    print(f"base prompt: train {truth.score(base, 'train'):.3f}, holdout {truth.score(base, 'holdout'):.3f}; "
          f"ceiling (every rule): train {top:.3f}, holdout {truth.score(ceiling, 'holdout'):.3f}")
    print("| arm | train | holdout | gap closed | accepted | harmful | useless | rules gained | rollouts "
          "| rollouts/accepted | model calls/accepted | rollouts/rule | notes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arm in arms:
        train = truth.score(arm.prompt, "train")
        gap = (train - truth.score(base, "train")) / (top - truth.score(base, "train"))
        accepted = len(arm.changes)
        per = f"{arm.rollouts / accepted:.0f}" if accepted else "–"
        per_model = f"{arm.model_rollouts / accepted:.0f}" if accepted else "–"
        rules = truth.stated(arm.prompt) - truth.stated(base)
        per_rule = f"{arm.rollouts / rules:.0f}" if rules > 0 else "–"
        print(f"| {arm.name} | {train:.3f} | {truth.score(arm.prompt, 'holdout'):.3f} | {gap:.0%} | {accepted} | "
              f"{arm.changes.count('harmful')} | {arm.changes.count('useless')} | {rules} | {arm.rollouts} | {per} | "
              f"{per_model} | {per_rule} | {arm.notes} |")
    print(f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
