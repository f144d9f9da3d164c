"""The one comparison procedure behind `optimizer run`, `nightly` and `noise`: which pairs to run,
in what order, and when to stop. `optimizer.gate` judges the pairs; this module decides what to
spend on them. `compare` steps three phases (`optimizer.comparison.phases`), each of which names
its next batch of trials and takes their results back, so that `compare` alone runs trials:

1. **Targets, sequentially.** Fresh pairs (trial indexes after the baseline's and after every
   other recorded trial of the base prompt that target selection saw, run once with each
   prompt) of the targeted buckets' train tasks, `batch_pairs` per bucket at a time, spread
   evenly over its tasks. After each batch the improvement test looks again (the betting test is
   valid at every look). A bucket stops when it is shown improved, when it reaches
   `max_target_pairs`, or for futility (not above zero after 16 pairs); the last batch is cut to
   the whole rounds that fit beside what the rest and the harm floor need. If a targeted bucket
   ends without being shown improved, the candidate is rejected here and nothing else runs.
2. **The rest.** The candidate runs every other task of the changed agent's suites (train,
   holdout, regression) at the baseline's trial indexes; each trial pairs with the baseline's.
   A task alone in its bucket pairs here only its usual trial count; the baseline's extra trials
   of it (`PlannedTrial.reserve`) wait for step 3.
3. **Harm, by power.** Every harm group gets at least `min_bucket_pairs` pairs, a bucket the
   patch names twice that. Its test's threshold is weighted toward the buckets the patch names
   (`gate.harm_thresholds`). Then, half a batch at a time, the open group whose mean score fell
   most (open: some pair changed, its bets on a drop have not lost half their stake, and it has
   fewer than `max_bucket_pairs` pairs; a fallen bucket the patch names goes before any other)
   gets more pairs, until no group is open, one is shown harmed, or the proposal's budget
   (`max_rollouts` trials, plus `extra_target_rollouts` per target after the first) is spent.
   More pairs of a task come from the baseline's reserve first (the candidate's trial is the only
   cost), then from fresh indexes (both prompts).

Base-prompt trials at fresh indexes are shared by every candidate of an iteration (the `Sides`
object caches them) and, through the loop's base pool, by later iterations on the same base
prompt, so a later candidate pays only for its own side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

from optimizer.comparison.phases import Comparing, HarmPhase, Phase, RestPhase, TargetPhase
from optimizer.comparison.plan import PairPlan
from optimizer.gate import Decision, GatePolicy, PairTable, named_buckets
from optimizer.proposal.diffs import changed_lines
from optimizer.trials.runner import PlannedTrial
from optimizer.types import Trial

Log = Callable[[str], None]


def buckets_named(diff: str, planned: list[PlannedTrial], agent: str,
                  asked: Iterable[tuple[str, str]] = ()) -> frozenset[tuple[str, str]]:
    """The train buckets of `agent` that a patch (a unified diff) names in the lines it adds or
    removes (`gate.named_buckets`), less the ones its request `asked` it to change: `compare`'s
    `named`."""
    added, removed = changed_lines(diff)
    named = named_buckets(added + removed, {(item.suite.name, item.task.bucket) for item in planned
                                            if item.suite.spec.agent_name == agent and item.task.split == "train"})
    return named - frozenset(asked)


class Sides(Protocol):
    """Runs trials with the base prompt or the candidate prompt."""

    def base(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Base-prompt trials at fresh indexes (may serve ones run before from a cache)."""

    def candidate(self, planned: list[PlannedTrial], label: str) -> list[Trial]:
        """Candidate-prompt trials."""

    def ran(self) -> int:
        """Trials actually run so far for this candidate (cache-served base trials excluded)."""


@dataclass
class Comparison:
    """The gate's decision, the trials the comparison ran for it and its batches of pairs."""

    decision: Decision
    rollouts: int = 0
    batches: int = 0


def compare(sides: Sides, *, planned: list[PlannedTrial], baseline: list[Trial], targets: Iterable[tuple[str, str]],
            agent: str, regression_suites: Iterable[str] = (), policy: GatePolicy = GatePolicy(),
            non_voting: Iterable[str] = (), log: Log = lambda message: None,
            seen: dict[tuple[str, str], int] | None = None, named: Iterable[tuple[str, str]] = ()) -> Comparison:
    """Compare the candidate with the base prompt; see the module docstring for the order.
    `seen`: per (suite, task), the first trial index no recorded trial of the base prompt holds
    (fresh pairs start there, so a fresh base trial is never one that target selection saw).
    `named`: the (suite, bucket)s the patch's changed lines name (`buckets_named`), whose harm
    tests get a larger share of `alpha_harm`, twice the floor of pairs and the next pairs first."""
    state = Comparing(policy=policy, targets=sorted(set(targets)), regression=set(regression_suites),
                      named=frozenset(named) if policy.name_weighting else frozenset(), planned=planned,
                      baseline=baseline, agent=agent, plan=PairPlan(planned, baseline, seen),
                      table=PairTable(non_voting), ran=sides.ran)
    for phase_of in (TargetPhase, RestPhase, HarmPhase):
        phase: Phase = phase_of(state)
        while (batch := phase.next_batch()) is not None:
            log(batch.note)
            base = sides.base(batch.base, batch.label) if batch.base else []
            phase.record(batch.held + base, sides.candidate(batch.candidate, batch.label))
        decision = phase.decision()
        if decision is not None:
            break
    return Comparison(decision, decision.rollouts, state.batches)
