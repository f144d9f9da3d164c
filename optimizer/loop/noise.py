"""`optimizer noise`: the gate's error rates, measured through the code `optimizer run` uses.

Each repeat plays the comparison of one iteration of `optimizer run` (`optimizer.comparison.compare`) on
real trials: a baseline run (seed a) picks the targets as `run` would, then candidates are
compared with the base prompt, each sampled under another seed (b), as a model at temperature
above zero gives different outcomes each time (on `mock/sim`, `sim_noise = "independent"` makes
its outcomes independent between prompts and seeds). The candidates, per repeat:

* **A/A**: the base prompt itself. Every acceptance is a false accept.
* **good** (`mock/sim` only): the base prompt plus the simulator's rule for the target. Power.
* **harmful** (`mock/sim` only): that rule plus a sentence contradicting a one-task bucket of the
  same agent whose pass rate the simulator then lowers by at least `PLANTED_DROP` (the largest
  such drop; none in a repeat whose target is the only such bucket). Every acceptance is a
  harmful accept.

Rates come with Clopper-Pearson 95% intervals; rollouts are counted per decision as `run`
counts them (both prompts, cached base trials excepted).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from optimizer.comparison.compare import buckets_named, compare
from optimizer.trials.evaluate import finish, judges_used, non_voting_graders
from optimizer.loop.iteration import LoopContext
from optimizer.loop.state import runner_settings
from optimizer.models import is_simulator, validate_model
from optimizer.proposal.diffs import unified as unified_diff
from optimizer.registry import AgentEntry, get_agent
from optimizer.proposal.request import select_targets
from optimizer.trials.runner import PlannedTrial, Runner, plan, read_prompt
from optimizer.stats import clopper_pearson
from optimizer.suites import load_suites
from optimizer.types import Trial

SEED_STRIDE = 7919
PLANTED_DROP = 0.2
"""The least fall in the victim task's pass rate for a planted harmful patch (smaller drops are
below what the gate's budget can detect on one task; docs/gate.md)."""
CASES = ("A/A", "good", "harmful")


@dataclass
class CaseTally:
    decisions: int = 0
    accepts: int = 0
    rollouts: int = 0
    capped: int = 0

    def add(self, accepted: bool, rollouts: int, capped: bool) -> None:
        self.decisions += 1
        self.accepts += accepted
        self.rollouts += rollouts
        self.capped += capped

    @property
    def rate(self) -> float:
        return self.accepts / self.decisions if self.decisions else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return clopper_pearson(self.accepts, self.decisions)

    @property
    def mean_rollouts(self) -> float:
        return self.rollouts / self.decisions if self.decisions else 0.0


@dataclass
class NoiseResult:
    repeats: int
    cases: dict[str, CaseTally] = field(default_factory=lambda: {name: CaseTally() for name in CASES})
    skipped: int = 0
    """Repeats whose baseline had no failing train trial (nothing to target)."""
    rollouts: int = 0
    details: list[dict] = field(default_factory=list)


class _NoiseSides:
    """Base prompt at seed a (fresh trials shared by the repeat's cases), candidate at seed b."""

    def __init__(self, run, base_cache: dict, candidate_root: Path):
        self.run_trials, self.base_cache, self.candidate_root = run, base_cache, candidate_root
        self.count = 0

    def base(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        missing = [i for i in planned if (i.suite.name, i.task.id, i.index) not in self.base_cache]
        for trial in self.run_trials("a", missing, None) if missing else []:
            self.base_cache[(trial.suite, trial.task_id, trial.index)] = trial
        self.count += len(missing)
        return [self.base_cache[(i.suite.name, i.task.id, i.index)] for i in planned]

    def candidate(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        self.count += len(planned)
        return self.run_trials("b", planned, self.candidate_root)

    def ran(self) -> int:
        return self.count


def measure_noise(ctx: LoopContext, *, repeats: int, suite_names: list[str] | None = None,
                  cases: tuple[str, ...] = CASES) -> NoiseResult:
    settings = ctx.settings.loop
    models = settings.models
    validate_model(models.agent_model, field="agent_model")
    suites = load_suites(suite_names or list(settings.suites), ctx.project_root)
    planned = plan(suites, trials=settings.trials, lone_task_factor=settings.lone_task_factor)
    regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
    policy = settings.gate_policy
    non_voting = non_voting_graders(ctx.store, suites, models.judge_model) if judges_used(suites) else []
    simulated = is_simulator(models.agent_model)
    result = NoiseResult(repeats=repeats)

    for repeat in range(repeats):
        seeds = {"a": models.seed + SEED_STRIDE * (2 * repeat + 1)}
        seeds["b"] = seeds["a"] + SEED_STRIDE

        def run(side: str, items: list[PlannedTrial], prompt_root: Path | None) -> list[Trial]:
            runner = Runner(runner_settings(settings, non_voting).with_seed(seeds[side]), ctx.store,
                            project_root=ctx.project_root, prompt_root=prompt_root, on_trial=ctx.on_trial)
            done = runner.run(suites, items, kind="noise")
            finish(done, ctx.store)
            result.rollouts += len(items)
            return done.trials

        baseline = run("a", planned, None)
        selection = select_targets(baseline, suites, max_targets=settings.target_buckets)
        if selection is None:
            result.skipped += 1
            continue
        targets = {(t.suite, t.bucket) for t in selection.targets}
        entry = get_agent(selection.agent)
        base_prompt = read_prompt(entry, ctx.project_root)
        candidates = _candidates(entry, base_prompt, planned, selection.agent, targets, simulated)
        candidates = {case: prompt for case, prompt in candidates.items() if case in cases}
        base_cache: dict = {}
        outcome = {"repeat": repeat, "targets": sorted(f"{s}/{b}" for s, b in targets)}
        for case, prompt in candidates.items():
            with tempfile.TemporaryDirectory(prefix="optimizer-noise-") as folder:
                target = Path(folder) / entry.prompt_file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(prompt, encoding="utf-8")
                sides = _NoiseSides(run, base_cache, Path(folder))
                named = buckets_named(unified_diff(base_prompt, prompt, entry.prompt_file), planned, selection.agent)
                comparison = compare(sides, planned=planned, baseline=baseline, targets=targets,
                                     agent=selection.agent, regression_suites=regression, policy=policy,
                                     non_voting=non_voting, named=named)
            result.cases[case].add(comparison.decision.accepted, comparison.rollouts, comparison.decision.capped)
            outcome[case] = comparison.decision.summary
        result.details.append(outcome)
        ctx.log(f"repeat {repeat + 1}/{repeats}: " + ", ".join(
            f"{case} {'ACCEPT' if 'accepted' in str(outcome[case])[:8] else 'reject'}" for case in candidates))
    return result


def _candidates(entry: AgentEntry, base_prompt: str, planned: list[PlannedTrial], agent: str,
                targets: set[tuple[str, str]], simulated: bool) -> dict[str, str]:
    """A repeat's candidate prompts by case: A/A always; good and harmful only on the simulator,
    whose rules say what a good patch states and what contradicts another bucket."""
    candidates = {"A/A": base_prompt}
    texts = entry.sim_profile.rule_texts if simulated and entry.sim_profile else None
    if texts is not None:
        rules = [texts.rules[b] for _, b in sorted(targets) if b in texts.rules]
        if rules:
            candidates["good"] = _with_lines(base_prompt, rules)
            victim = _one_task_victim(planned, agent, targets, texts.contradictions, entry.sim_profile,
                                      candidates["good"])
            if victim:
                candidates["harmful"] = _with_lines(base_prompt, rules + [texts.contradictions[victim]])
    return candidates


def _one_task_victim(planned: list[PlannedTrial], agent: str, targets: set[tuple[str, str]],
                     contradictions: dict[str, str], profile, good_prompt: str) -> str | None:
    """The train bucket of `agent` with a single task, other than the targets, whose contradiction
    (added to `good_prompt`) lowers that task's pass rate on the simulator most, if by at least
    `PLANTED_DROP`."""
    tasks: dict[tuple[str, str], dict[str, object]] = {}
    for item in planned:
        if item.suite.spec.agent_name == agent and item.task.split == "train":
            tasks.setdefault((item.suite.name, item.task.bucket), {})[item.task.id] = item.task
    drops = {}
    for (suite, bucket), members in sorted(tasks.items()):
        if len(members) == 1 and (suite, bucket) not in targets and bucket in contradictions:
            task = next(iter(members.values()))
            harmful = _with_lines(good_prompt, [contradictions[bucket]])
            drops[bucket] = profile.pass_probability(task, good_prompt) - profile.pass_probability(task, harmful)
    best = max(drops, key=lambda bucket: drops[bucket], default=None)
    return best if best is not None and drops[best] >= PLANTED_DROP else None


def _with_lines(prompt: str, lines: list[str]) -> str:
    return prompt.rstrip("\n") + "\n" + "\n".join(f"- {line}" for line in lines) + "\n"
