"""The gate's error rates on the noisy simulator: today's gate, the previous one, and gepa's own
acceptance, side by side on the same planted cases. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/gate_power.py [--aa 300] [--good 40] [--harm 40] [--suites card_agent pkm_agent]
        [--buckets B ...] [--arms new previous gepa] [--trials 4] [--policy FIELD=VALUE ...]

Cases, per suite (each repeat draws a fresh baseline as the loop plans it: `--trials` per task,
4 by default, `lone_task_factor` times that for a train task alone in its bucket):
* **A/A**: the candidate is the base prompt, sampled again. Targets are chosen from the baseline
  as `optimizer run` chooses them. Every acceptance is a false accept.
* **good**: the candidate adds the simulator's rule for bucket B, and B is the target. Power.
* **harmful**: the rule for the target plus a sentence contradicting a one-task bucket (the
  smallest buckets, when a suite has none of one task) whose true mean score falls by at least
  0.2; with `--victims all`, every other bucket whose true mean falls by at least 0.05. Every
  acceptance is a harmful accept.
* **effect harms** (`--cases effects`): the target's rule plus one wording of a harmful effect of
  the sim's effect library (`optimizer.trials.sim.Effect`): `named` (the line names a bucket it lowers),
  `unnamed` (names none), `other` (names a bucket it leaves alone), `unnamed+harmless` (the
  unnamed line beside a distractor, a line that moves nothing); spread over several buckets
  or graded (-0.10 to -0.30 on the pass rate). The target is the lowest bucket the effect leaves
  alone. Every acceptance is a harmful accept.
* **gains** (`--cases gains`): the unnamed wording of a helpful effect (+0.10 to +0.30 on its
  bucket's pass rate), that bucket the target: the power curve over effect sizes.

Trials are drawn from `mock/sim`'s own model, not run through the agents: a trial passes with the
probability the sim's rule machinery gives its prompt (`SimProfile.pass_probability`), each draw
independent of the other prompt's (`sim_noise = "independent"`), and a failing trial scores
what the real agent and graders gave that task's failing trials in a calibration run made at
start-up through the runner. That keeps tens of thousands of decisions to minutes, and the
decisions are made by the same `optimizer.comparison.compare.compare` that `optimizer run` calls.
`optimizer noise` measures the same things through the real runner.

Arms: `new` is `optimizer.comparison.compare` with default settings, on a base prompt's first proposal (every
trial counted); `pooled` is the same gate on a later proposal, whose base-prompt trials at fresh
indexes earlier proposals already ran (the loop's base pool: only the candidate's trials count);
`previous` is the gate this project
used before (fixed 12 fresh pairs, a Bonferroni second look, a permutation test per bucket at
0.20 uncorrected, a -0.10 point limit; kept in benchmarks/legacy_gate.py); `gepa` is the default
acceptance of the `gepa` package's reflective mutation (the child's score summed over a minibatch
of 3 train examples must beat the parent's on the same minibatch, both evaluated afresh);
`weighted` is `new` with its harm tests weighted toward the buckets the patch names
(`name_weighting`, off by default); `merge` is `new` counting an accept only when its verdict is
*merge* (what `nightly --merge` merges; the others are *proposed*, docs/gate.md#merge-or-propose).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import legacy_gate  # noqa: E402

from optimizer.comparison.compare import buckets_named, compare  # noqa: E402
from optimizer.settings.config import Settings  # noqa: E402
from optimizer.gate import GatePolicy  # noqa: E402
from optimizer.loop.noise import CaseTally  # noqa: E402
from optimizer.proposal.diffs import unified as unified_diff  # noqa: E402
from optimizer.registry import get_agent  # noqa: E402
from optimizer.proposal.request import select_targets  # noqa: E402
from optimizer.trials.runner import PlannedTrial, Runner, plan  # noqa: E402
from optimizer.scoring import trials_frame  # noqa: E402
from optimizer.store import Store  # noqa: E402
from optimizer.suites import load_suites  # noqa: E402
from optimizer.nightly.spending import decision_alpha  # noqa: E402
from optimizer.types import Trial  # noqa: E402

GEPA_MINIBATCH = 3


# ---------------------------------------------------------------- the fast simulator
def failing_scores(suite_names: list[str], trials: int) -> dict[tuple[str, str], list[float]]:
    """Scores of failing trials per task, from a real run of mock/sim through the runner."""
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(agent_model="mock/sim", judge_model="mock/sim", sim_noise="independent", cache=False,
                            concurrency=8)
        store = Store(f"sqlite:///{folder}/bench.db")
        suites = load_suites(suite_names, ROOT)
        run = Runner(settings.runner, store, project_root=ROOT).run(suites, plan(suites, trials=trials), kind="bench")
    table: dict[tuple[str, str], list[float]] = {}
    for trial in run.trials:
        table.setdefault((trial.suite, trial.task_id), [])
        if trial.status == "failed":
            table[(trial.suite, trial.task_id)].append(trial.score or 0.0)
    return table


def calibrated(suite_names: list[str], path: str | None) -> dict[tuple[str, str], list[float]]:
    """`failing_scores`, kept in `path` (JSON) when given: runs comparing gate settings then share
    one calibration, so their differences come from the settings alone."""
    if path and Path(path).exists():
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
        if set(saved["suites"]) >= set(suite_names):
            return {(suite, task): scores for suite, task, scores in saved["fails"]}
    fails = failing_scores(suite_names, trials=16)
    if path:
        Path(path).write_text(json.dumps({"suites": suite_names, "fails": [[s, t, v] for (s, t), v in fails.items()]}),
                              encoding="utf-8")
    return fails


@dataclass
class FastSim:
    suites: list
    fails: dict[tuple[str, str], list[float]]

    def probability(self, item: PlannedTrial, prompt: str) -> float:
        profile = get_agent(item.suite.spec.agent_name).sim_profile
        return profile.pass_probability(item.task, prompt)

    def trial(self, item: PlannedTrial, prompt: str, rng: random.Random) -> Trial:
        passed = rng.random() < self.probability(item, prompt)
        scores = self.fails[(item.suite.name, item.task.id)] or [0.0]
        score = 1.0 if passed else rng.choice(scores)
        return Trial(suite=item.suite.name, task_id=item.task.id, bucket=item.task.bucket, split=item.task.split,
                     index=item.index, status="passed" if passed else "failed", score=score)

    def true_mean(self, items: list[PlannedTrial], prompt: str) -> float:
        """The expected task-weighted mean score of these (distinct) tasks under `prompt`."""
        values = []
        for item in items:
            scores = self.fails[(item.suite.name, item.task.id)] or [0.0]
            p = self.probability(item, prompt)
            values.append(p + (1 - p) * sum(scores) / len(scores))
        return sum(values) / len(values)


@dataclass
class FastSides:
    """The `compare` interface over the fast simulator: base trials cached by index. `pooled`:
    every base-prompt trial at a fresh index was already run by an earlier proposal on the same
    base prompt (the loop's base pool), so only the candidate's trials count."""

    sim: FastSim
    base_prompt: str
    candidate_prompt: str
    rng: random.Random
    pooled: bool = False
    cache: dict = field(default_factory=dict)
    count: int = 0

    def base(self, planned, label):
        out = []
        for item in planned:
            key = (item.suite.name, item.task.id, item.index)
            if key not in self.cache:
                self.cache[key] = self.sim.trial(item, self.base_prompt, self.rng)
                self.count += not self.pooled
            out.append(self.cache[key])
        return out

    def candidate(self, planned, label):
        self.count += len(planned)
        return [self.sim.trial(item, self.candidate_prompt, self.rng) for item in planned]

    def ran(self) -> int:
        return self.count


# ---------------------------------------------------------------- the three arms
def new_gate(sim, planned, baseline, base, candidate, targets, agent, rng, policy, pooled=False, merge=False):
    """`merge`: count an accept only when its verdict lets an unattended night merge it."""
    sides = FastSides(sim, base, candidate, rng, pooled)
    named = buckets_named(unified_diff(base, candidate, "prompt.md"), planned, agent)
    result = compare(sides, planned=planned, baseline=baseline, targets=targets, agent=agent, policy=policy,
                     named=named)
    accepted = result.decision.accepted and (not merge or result.decision.verdict == "merge")
    return accepted, result.rollouts, result.decision.capped


def previous_gate(sim, planned, baseline, base, candidate, targets, agent, rng):
    """The former staged comparison: 12 fresh pairs per target (>= 3 per task), a second look of
    12 more when every target rose but not significantly (each look at alpha/2), then the rest."""
    config = legacy_gate.per_look(legacy_gate.GateConfig(), 2)
    def is_target(item):
        return (item.suite.name, item.task.bucket) in targets and item.task.split != "holdout"
    counts, tasks = {}, {}
    for item in planned:
        counts[(item.suite.name, item.task.id)] = counts.get((item.suite.name, item.task.id), 0) + 1
        if is_target(item):
            tasks.setdefault((item.suite.name, item.task.bucket), {})[(item.suite.name, item.task.id)] = item
    def fresh(offset_pairs, pairs):
        out = []
        for bucket, items in tasks.items():
            per = max(3, -(-pairs // len(items))) if offset_pairs == 0 else -(-pairs // len(items))
            first = 0 if offset_pairs == 0 else max(3, -(-12 // len(items)))
            for key, item in items.items():
                out += [PlannedTrial(item.suite, item.task, counts[key] + first + i) for i in range(per)]
        return out
    look1 = fresh(0, 12)
    confirm = [sim.trial(i, base, rng) for i in look1]
    after = [sim.trial(i, candidate, rng) for i in look1]
    rollouts = 2 * len(look1)
    kept = [t for t in baseline if not ((t.suite, t.bucket) in targets and t.split != "holdout")]
    def frames(cand):
        order = lambda ts: sorted(ts, key=lambda t: (t.suite, t.task_id, t.index))  # noqa: E731
        return trials_frame(order(kept + confirm)), trials_frame(order(cand))
    decision = legacy_gate.decide(*frames(after), targets=targets, config=config, stage="targeted")
    if legacy_gate.borderline(decision):
        look2 = fresh(12, 12)
        confirm += [sim.trial(i, base, rng) for i in look2]
        after += [sim.trial(i, candidate, rng) for i in look2]
        rollouts += 2 * len(look2)
        decision = legacy_gate.decide(*frames(after), targets=targets, config=config, stage="targeted")
    if not decision.accepted:
        return False, rollouts, False
    rest = [item for item in planned if not is_target(item) and item.suite.spec.agent_name == agent]
    after += [sim.trial(i, candidate, rng) for i in rest]
    rollouts += len(rest)
    decision = legacy_gate.decide(*frames(after), targets=targets, config=config)
    return decision.accepted, rollouts, False


def gepa_acceptance(sim, planned, base, candidate, rng):
    """gepa's reflective-mutation step: parent and child on the same minibatch of 3 train
    examples (one rollout each), accepted when the child's sum is strictly higher."""
    train = sorted({(i.suite.name, i.task.id): i for i in planned if i.task.split == "train"}.items())
    batch = [item for _, item in rng.sample(train, GEPA_MINIBATCH)]
    parent = sum(sim.trial(i, base, rng).score for i in batch)
    child = sum(sim.trial(i, candidate, rng).score for i in batch)
    return child > parent, 2 * GEPA_MINIBATCH, False


# ---------------------------------------------------------------- cases
def cells(tally: CaseTally) -> str:
    low, high = tally.interval
    return (f"{tally.accepts:>4}/{tally.decisions:<4} {tally.rate:6.1%} [{low:5.1%}, {high:5.1%}] "
            f"{tally.mean_rollouts:6.0f} {tally.capped:>4}")


def with_lines(prompt: str, *lines: str) -> str:
    return prompt.rstrip("\n") + "\n" + "\n".join(f"- {line}" for line in lines) + "\n"


def effect_harms(effect, texts, base, sim, by_bucket, repeats, run_case, suite_name, wordings=None) -> None:
    """One harmful case per wording of `effect`: the rule of the lowest bucket it leaves alone
    (the target) plus that wording; and `unnamed+harmless`, the unnamed wording beside one of the
    sim's distractors (a line that moves no bucket), as a real patch's harm rides with other edits."""
    target = min((b for b in by_bucket if b not in effect.change), key=lambda b: sim.true_mean(by_bucket[b], base))
    variants = [(kind, (wording,)) for kind, wording in sorted(effect.wordings.items())]
    if "unnamed" in effect.wordings:
        variants.append(("unnamed+harmless", (effect.wordings["unnamed"], texts.distractors[0])))
    for kind, lines in [(kind, lines) for kind, lines in variants if not wordings or kind in wordings]:
        harmful = with_lines(base, texts.rules[target], *lines)
        drops = " ".join(f"{bucket[:12]} -{sim.true_mean(by_bucket[bucket], base) - sim.true_mean(by_bucket[bucket], harmful):.2f}"
                         for bucket, change in effect.change.items() if change < 0 and bucket in by_bucket)
        run_case(f"harm {effect.name} [{kind}] ({drops})", harmful, repeats, lambda _, t=target: {(suite_name, t)})


def aa_nights(args, sim, planned, base, agent, rng, policy, chosen, baseline_draw, suite_name) -> None:
    """A/A nights: `--night-iterations` iterations of `--night-candidates` A/A candidates each, a
    fresh baseline per iteration (a nightly's baseline after a rejection is new trials of the same
    prompt); a night that accepts any candidate would merge a patch that changes nothing. Two rows
    over the same nights: any accept (`new`), and any accept whose verdict is merge (`merge`, what
    `nightly --merge` merges)."""
    tally, merges = CaseTally(), CaseTally()
    for _ in range(args.nights):
        accepted, merged, rollouts, decided = False, False, 0, 0
        for _ in range(args.night_iterations):
            baseline = baseline_draw()
            targets = chosen(baseline)
            if targets is None:
                continue
            for _ in range(args.night_candidates):
                decided += 1
                level = decision_alpha(policy.alpha, args.night_alpha, decided) if args.night_alpha else policy.alpha
                sides = FastSides(sim, base, base, rng, False)
                result = compare(sides, planned=planned, baseline=baseline, targets=targets, agent=agent,
                                 policy=replace(policy, alpha=level))
                accepted = accepted or result.decision.accepted
                merged = merged or (result.decision.accepted and result.decision.verdict == "merge")
                rollouts += result.rollouts
        tally.add(accepted, rollouts, False)
        merges.add(merged, rollouts, False)
    spending = f"night_alpha {args.night_alpha}" if args.night_alpha else "alpha each"
    name = f"A/A night ({args.night_iterations} it. x {args.night_candidates} cand., {spending})"
    print(f"{suite_name:<11} {name:<40} {'new':<9} {cells(tally)}", flush=True)
    print(f"{suite_name:<11} {name:<40} {'merge':<9} {cells(merges)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=300)
    parser.add_argument("--good", type=int, default=40)
    parser.add_argument("--harm", type=int, default=40)
    parser.add_argument("--suites", nargs="*", default=["card_agent", "pkm_agent"])
    parser.add_argument("--buckets", nargs="*", default=None, help="targets tried for power (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=4,
                        help="baseline trials per task (the loop's --trials; `make run` uses 1)")
    parser.add_argument("--lone-task-factor", type=int, default=Settings.model_fields["lone_task_factor"].default,
                        help="times the trials of a task alone in its train bucket (the loop's setting)")
    parser.add_argument("--arms", nargs="*", default=["new", "pooled", "previous", "gepa"],
                        help="arms to run: new pooled previous gepa weighted merge (default: the first four)")
    parser.add_argument("--victims", choices=["lone", "all"], default="lone",
                        help="harmful cases: contradict the smallest buckets (lone, default) or every bucket whose "
                             "true mean falls at least 0.05 (all)")
    parser.add_argument("--cases", nargs="*", default=["aa", "good", "contradictions", "effects", "gains"],
                        help="cases to run: aa good contradictions effects gains (default: all)")
    parser.add_argument("--nights", type=int, default=0, help="A/A nights to run (default: none)")
    parser.add_argument("--night-iterations", type=int, default=6)
    parser.add_argument("--night-candidates", type=int, default=2)
    parser.add_argument("--night-alpha", type=float, default=Settings.model_fields["night_alpha"].default,
                        help="the night's decisions spend this family-wise level (optimizer.nightly.spending); 0: each "
                             "decision at alpha, as before")
    parser.add_argument("--effects", nargs="*", default=None, help="effects of the library to try (default: all)")
    parser.add_argument("--wordings", nargs="*", default=None,
                        help="wordings of a harmful effect to try: named unnamed other unnamed+harmless (default: all)")
    parser.add_argument("--calibration", default=None, metavar="PATH",
                        help="keep the failing-trial scores in this JSON file and reuse them (default: measure anew)")
    parser.add_argument("--policy", nargs="*", default=[], metavar="FIELD=VALUE",
                        help="override GatePolicy fields, e.g. max_rollouts=400")
    args = parser.parse_args()
    started = time.monotonic()
    overrides = dict(item.split("=", 1) for item in args.policy)
    policy = GatePolicy(**{key: (value == "True") if isinstance(getattr(GatePolicy(), key), bool)
                           else type(getattr(GatePolicy(), key))(value) for key, value in overrides.items()})
    fails = calibrated(args.suites, args.calibration)
    print(f"calibration: failing-trial scores from {16} real mock/sim trials per task "
          f"({time.monotonic() - started:.0f} s)")
    print(f"policy: {policy}")
    header = (f"{'suite':<11} {'case':<40} {'arm':<9} {'accepted':>9}  rate   [95% CP]       "
              f"rollouts capped")
    for suite_name in args.suites:
        suites = load_suites([suite_name], ROOT)
        suite = suites[0]
        agent = suite.spec.agent_name
        entry = get_agent(agent)
        base = (ROOT / entry.prompt_file).read_text(encoding="utf-8")
        texts = entry.sim_profile.rule_texts
        planned = plan(suites, trials=args.trials, lone_task_factor=args.lone_task_factor)
        sim = FastSim(suites, fails)
        rng = random.Random(args.seed)
        print(f"\n{suite_name}: baseline of {len(planned)} trials per repeat, "
              f"{sum(item.reserve for item in planned)} of them the reserve of tasks alone in their bucket")
        by_bucket: dict[str, list[PlannedTrial]] = {}
        for item in planned:
            if item.index == 0 and item.task.split == "train":
                by_bucket.setdefault(item.task.bucket, []).append(item)

        def baseline_draw() -> list[Trial]:
            return [sim.trial(item, base, rng) for item in planned]

        def run_case(name: str, candidate: str, repeats: int, targets_for) -> None:
            tallies = {arm: CaseTally() for arm in args.arms}
            for _ in range(repeats):
                baseline = baseline_draw()
                targets = targets_for(baseline)
                if targets is None:
                    continue
                for arm in ("new", "pooled", "weighted", "merge"):
                    if arm in tallies:
                        arm_policy = replace(policy, name_weighting=True) if arm == "weighted" else policy
                        tallies[arm].add(*new_gate(sim, planned, baseline, base, candidate, targets, agent, rng,
                                                   arm_policy, pooled=arm == "pooled", merge=arm == "merge"))
                if "previous" in tallies:
                    tallies["previous"].add(*previous_gate(sim, planned, baseline, base, candidate, targets, agent,
                                                           rng))
                if "gepa" in tallies:
                    tallies["gepa"].add(*gepa_acceptance(sim, planned, base, candidate, rng))
            for arm, tally in tallies.items():
                print(f"{suite_name:<11} {name:<40} {arm:<9} {cells(tally)}", flush=True)

        print()
        print(header)

        def chosen(baseline):
            selection = select_targets(baseline, suites)
            return None if selection is None else {(t.suite, t.bucket) for t in selection.targets}

        if "aa" in args.cases:
            run_case("A/A (targets as `run` picks them)", base, args.aa, chosen)
        if args.nights:
            aa_nights(args, sim, planned, base, agent, rng, policy, chosen, baseline_draw, suite_name)
        buckets = (args.buckets or sorted(by_bucket)) if "good" in args.cases else []
        for bucket in buckets:
            if bucket not in texts.rules or bucket not in by_bucket:
                continue
            good = with_lines(base, texts.rules[bucket])
            gain = sim.true_mean(by_bucket[bucket], good) - sim.true_mean(by_bucket[bucket], base)
            run_case(f"good: {bucket} (+{gain:.2f})", good, args.good, lambda _, b=bucket: {(suite_name, b)})
        target = min(by_bucket, key=lambda b: sim.true_mean(by_bucket[b], base))
        smallest = min(len(items) for bucket, items in by_bucket.items() if bucket != target)
        least = 0.2 if args.victims == "lone" else 0.05
        for bucket, items in sorted(by_bucket.items()) if "contradictions" in args.cases else []:
            if (args.victims == "lone" and len(items) != smallest) or bucket == target:
                continue
            harmful = with_lines(base, texts.rules[target], texts.contradictions[bucket])
            drop = sim.true_mean(items, base) - sim.true_mean(items, harmful)
            if drop < least:
                print(f"{suite_name:<11} (harmful: {bucket} falls only {drop:.2f}; not a planted case)")
                continue
            label = f"harm: {target} + !{bucket}{'' if smallest == 1 else f' [{smallest} tasks]'} (-{drop:.2f})"
            run_case(label, harmful, args.harm,
                     lambda _, t=target: {(suite_name, t)})
        for effect in texts.effects:
            if args.effects and effect.name not in args.effects:
                continue
            if effect.harmful and "effects" in args.cases:
                effect_harms(effect, texts, base, sim, by_bucket, args.harm, run_case, suite_name, args.wordings)
            elif not effect.harmful and "gains" in args.cases:
                bucket, change = next(iter(effect.change.items()))
                gain = sim.true_mean(by_bucket[bucket], with_lines(base, effect.wordings["unnamed"])) - \
                    sim.true_mean(by_bucket[bucket], base)
                run_case(f"gain {effect.name}: {bucket} p{change:+.2f} (+{gain:.2f})",
                         with_lines(base, effect.wordings["unnamed"]), args.good, lambda _, b=bucket: {(suite_name, b)})
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
