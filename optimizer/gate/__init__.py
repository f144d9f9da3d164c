"""The gate: does a candidate prompt beat the base prompt on its targets, and harm nothing?

The gate judges *pairs*: a (suite, task, trial index) run once with each prompt. `PairTable`
collects them as `optimizer.comparison.compare` runs batches; `decide` turns a table into a `Decision`.
docs/gate.md gives the methods, the reasons for them and their measured error rates.

A bucket's change is the mean over its tasks of each task's mean pair change (tasks weigh the
same). Its tests are sequential sign tests by betting (`optimizer.stats`): under the null
hypothesis that the patch changes nothing, the two trials of a pair are exchangeable, so each
non-zero change is as likely up as down; the test bets on the signs of the changes in the order
the pairs were run, and stays valid however many batches are added and whenever it stops.

Strict mode (the default):

1. **Improvement.** Every targeted bucket improves: its anytime-valid p-value is below `alpha`
   (an intersection-union test: no adjustment for several targets). Only fresh trials count
   here (the baseline's trials chose the targets, and would favour any patch by regression to
   the mean).
2. **No harm.** For every other train bucket of the changed agent, the holdout split, all of
   those together (`POOLED`: a harm spread thin over several buckets) and each regression suite,
   a one-sided betting test of a drop, betting on the signs of the score changes and of the
   pass/fail flips at once (`GroupStats._harm_path`). A group is *harmed* when
   its wealth reaches its threshold: m / `alpha_harm` (m = groups tested: Bonferroni over
   e-values, so the chance that noise vetoes a patch that harms nothing is at most `alpha_harm`
   in all), or, with `name_weighting` on and a patch that names some of the buckets
   (`named_buckets`), a weighted Bonferroni that spends `NAMED_SHARE` of `alpha_harm` on those
   (`harm_thresholds`). A group still
   open when the comparison ends (some pair changed and its drop bets have not lost half their
   stake, see `suspicious`), whose detectable drop is larger than `max_bucket_drop`, is reported
   as *not shown safe*; with `refuse_unsafe` it rejects. A group's bets falling to
   `CLEARED_BELOW` clear it only once it has `clear_after` pairs.
3. **Unscored trials.** Pairs with an errored side are left out of the values; the candidate is
   rejected when its trials end without a score significantly more often than the base prompt's
   on the same pairs (a sequential sign test at `alpha_harm`, `rules.unscored_p`), the trials the
   infrastructure ended (`scoring.spoiled`: past the deadline while the model failed, was silent
   or far slower than normal) included: a patch can make the model slow. A harm group left with
   no pair scored on both sides is *not shown safe*, never "no harm found".

Every group reports its pairs, change, a 95% t-interval over its rounds (descriptive), verdict,
and the drop its harm test could detect at the pairs used (80% power). Graders listed as
*non-voting* (LLM judges not calibrated on the judge model in use) are left out of the values;
a group whose trials only such graders scored is *unjudged* and can neither improve nor harm.

Lenient mode applies the plain rule: some bucket mean up, no bucket mean down.

Modules, one concern each (the policy, its levels and budget, is the gate's part of the settings,
`optimizer.settings.parts.GatePolicy`, re-exported here): `pairs` (what pairs up and what a side
counts for), `sequential` (a group's change and its betting tests), `groups` (what is tested),
`improvement` (the targets' test and when it stops), `harm` (the harm family's thresholds and
verdicts), `report` (rows, rule results, the `Decision`), `rules` (`decide`).
"""

from optimizer.gate.groups import KIND_ORDER, POOLED, Groups, groups_of, harm_group, is_named, named_buckets
from optimizer.gate.harm import CLEARED_BELOW, NAMED_SHARE, harm_rows, harm_thresholds, suspicious
from optimizer.gate.improvement import FUTILE_AFTER, improvement_status
from optimizer.gate.pairs import Pair, PairTable, TaskKey
from optimizer.settings.parts import GateMode, GatePolicy
from optimizer.gate.report import BucketChange, Decision, RuleResult, bucket_row
from optimizer.gate.rules import decide, errored_rejects, leans
from optimizer.gate.sequential import EPSILON, GroupStats, group_stats

__all__ = ["CLEARED_BELOW", "EPSILON", "FUTILE_AFTER", "KIND_ORDER", "NAMED_SHARE", "POOLED", "BucketChange",
           "Decision", "GateMode", "GatePolicy", "GroupStats", "Groups", "Pair", "PairTable", "RuleResult", "TaskKey",
           "bucket_row", "decide", "errored_rejects", "group_stats", "groups_of", "harm_group", "harm_rows", "harm_thresholds",
           "improvement_status", "is_named", "leans", "named_buckets", "suspicious"]
