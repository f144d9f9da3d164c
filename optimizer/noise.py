"""`optimizer noise`: how often would the gate accept a patch that changes nothing?

Each repeat evaluates the unchanged prompt twice with fresh seeds (an A/A pair), picks targets
from the first run exactly as `optimizer run` would, and asks the gate whether the second run
improved them. Every acceptance is a false accept. The strict gate must stay at or below 5%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optimizer.evaluate import finish
from optimizer.gate import GateConfig, decide
from optimizer.loop import LoopContext, loop_settings
from optimizer.models import validate_model
from optimizer.request import select_targets
from optimizer.runner import Runner, plan
from optimizer.scoring import trials_frame
from optimizer.suites import load_suite

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
    suites = [load_suite(name, ctx.project_root) for name in (suite_names or settings.suites)]
    planned = plan(suites, trials=settings.trials)
    regression = {suite.name for suite in suites if suite.spec.kind == "regression"}
    strict = GateConfig(mode="strict", max_bucket_drop=settings.max_bucket_drop, alpha=settings.alpha,
                        alpha_harm=settings.alpha_harm)
    lenient = GateConfig(mode="lenient")
    result = NoiseResult(repeats=repeats)
    for repeat in range(repeats):
        runs = []
        for side in (0, 1):
            seeded = settings.model_copy(update={"seed": settings.seed + SEED_STRIDE * (2 * repeat + side + 1)})
            runner = Runner(seeded, ctx.store, project_root=ctx.project_root, on_trial=ctx.on_trial)
            run = runner.run(suites, planned, kind="noise")
            finish(run, ctx.store)
            runs.append(run)
            result.rollouts += len(planned)
        selection = select_targets(runs[0].trials, suites, max_targets=settings.target_buckets)
        if selection is None:
            result.skipped += 1
            continue
        targets = {(t.suite, t.bucket) for t in selection.targets}
        before, after = trials_frame(runs[0].trials), trials_frame(runs[1].trials)
        strict_decision = decide(before, after, targets=targets, regression_suites=regression, config=strict)
        lenient_decision = decide(before, after, targets=targets, regression_suites=regression, config=lenient)
        result.strict_accepts += strict_decision.accepted
        result.lenient_accepts += lenient_decision.accepted
        result.details.append({"repeat": repeat, "targets": sorted(f"{s}/{b}" for s, b in targets),
                               "strict": strict_decision.summary, "lenient": lenient_decision.accepted})
        ctx.log(f"repeat {repeat + 1}/{repeats}: strict {'ACCEPT' if strict_decision.accepted else 'reject'}, "
                f"lenient {'ACCEPT' if lenient_decision.accepted else 'reject'}")
    return result
