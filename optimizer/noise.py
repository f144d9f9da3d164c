"""`optimizer noise`: how often would the gate accept a patch that changes nothing?

Each repeat plays one iteration of `optimizer run` in which the "patch" changes nothing: a
baseline run (seed a) picks the targets exactly as `optimizer run` would, fresh base-prompt
trials of the targeted tasks are run for the confirmation (seed a), and the "candidate" is the
same prompt sampled again with another seed (b), staged like a real candidate. The gate then
decides as it would on a real patch; every acceptance is a false accept. The strict gate must
stay at or below 5%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optimizer.evaluate import finish
from optimizer.gate import GateConfig, borderline, decide, per_look
from optimizer.loop import LoopContext, StagePlan, gate_frames, loop_settings
from optimizer.models import validate_model
from optimizer.request import select_targets
from optimizer.runner import Runner, plan
from optimizer.suites import load_suites

SEED_STRIDE = 7919


@dataclass
class NoiseResult:
    repeats: int
    strict_accepts: int = 0
    lenient_accepts: int = 0
    skipped: int = 0
    """Repeats whose first run had no failing train trial (nothing to target)."""
    rollouts: int = 0
    details: list[dict] = field(default_factory=list)

    @property
    def tested(self) -> int:
        return self.repeats - self.skipped

    def rate(self, accepts: int) -> float:
        return accepts / self.tested if self.tested else 0.0


def measure_noise(ctx: LoopContext, *, repeats: int, suite_names: list[str] | None = None) -> NoiseResult:
    settings = loop_settings(ctx.settings)
    validate_model(settings.agent_model, field="agent_model")
    suites = load_suites(suite_names or settings.suites, ctx.project_root)
    planned = plan(suites, trials=settings.trials)
    regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
    strict = GateConfig(mode="strict", max_bucket_drop=settings.max_bucket_drop, alpha=settings.alpha,
                        alpha_harm=settings.alpha_harm)
    lenient = GateConfig(mode="lenient")
    result = NoiseResult(repeats=repeats)
    def run(seed: int, items) -> list:
        seeded = settings.model_copy(update={"seed": seed})
        runner = Runner(seeded, ctx.store, project_root=ctx.project_root, on_trial=ctx.on_trial)
        done = runner.run(suites, items, kind="noise")
        finish(done, ctx.store)
        result.rollouts += len(items)
        return done.trials

    for repeat in range(repeats):
        seed_a = settings.seed + SEED_STRIDE * (2 * repeat + 1)
        seed_b = seed_a + SEED_STRIDE
        baseline = run(seed_a, planned)
        selection = select_targets(baseline, suites, max_targets=settings.target_buckets)
        if selection is None:
            result.skipped += 1
            continue
        targets = {(t.suite, t.bucket) for t in selection.targets}
        stages = StagePlan.build(planned, targets, selection.agent, settings.confirm_trials, settings.confirm_pairs,
                                 settings.extend_pairs)
        confirm = run(seed_a, stages.confirm)
        candidate = run(seed_b, stages.targeted + stages.rest)
        agents = {suite.name: suite.spec.agent_name for suite in suites}
        candidate += [t for t in baseline if agents[t.suite] != selection.agent]
        gate = per_look(strict, stages.looks)
        before, after = gate_frames(baseline, confirm, candidate, targets)
        first = decide(before, after, targets=targets, regression_suites=regression, config=gate, stage="targeted")
        lenient_decision = decide(before, after, targets=targets, regression_suites=regression, config=lenient)
        if borderline(first) and stages.extension:  # the loop's second look
            confirm += run(seed_a, stages.extension)
            candidate += run(seed_b, stages.extension)
            before, after = gate_frames(baseline, confirm, candidate, targets)
            first = decide(before, after, targets=targets, regression_suites=regression, config=gate,
                           stage="targeted")
        strict_decision = decide(before, after, targets=targets, regression_suites=regression, config=gate) \
            if first.accepted else first
        result.strict_accepts += strict_decision.accepted
        result.lenient_accepts += lenient_decision.accepted
        result.details.append({"repeat": repeat, "targets": sorted(f"{s}/{b}" for s, b in targets),
                               "strict": strict_decision.summary, "lenient": lenient_decision.accepted})
        ctx.log(f"repeat {repeat + 1}/{repeats}: strict {'ACCEPT' if strict_decision.accepted else 'reject'}, "
                f"lenient {'ACCEPT' if lenient_decision.accepted else 'reject'}")
    return result
