"""How often a patcher's proposals help: the full request beside the contrast request, same seeds.

Runs a baseline of the suite, takes its worst few train buckets (`select_targets`' order), and
for each bucket asks the patcher for N proposals per protocol: the full request (`--full`:
`rule` for the embedded patchers, else `edits`) and the contrast request
(`optimizer.proposal.contrast`; `guided` when it ends with a rule to complete, from the target's most
frequent named confusion, else `free`). Proposal n of either protocol is drawn with the same seed (sampling
temperature `patcher_temperature`, seed from `--seed` and n). Each proposal goes through the
loop's pre-rollout checks (`check_prompt_text`: size, lint); one that passes is screened on fresh
trials of the bucket's train tasks (indexes past the baseline's, the base prompt on the same
indexes), and it *screens above base* when its mean score there is higher. Prints per bucket
and protocol: proposals, errors, refused by the checks, screened above base, and the best
candidate's effect (its mean minus the base's); then the share screened above base per protocol.

On the simulator it needs nothing (`mock/sim` agent, `mock/patcher` at `--skill`); there the
weak patcher answers from the targets alone, so both protocols draw the same rules and the
figures check the plumbing, not the protocols. On the embedded model (quiet machine, model
installed):

    python benchmarks/patcher_quality.py --agent-model local/qwen2.5-coder-1.5b \\
        --patcher-model local/qwen2.5-coder-1.5b --buckets 3 --n 8 --fresh 4
"""

from __future__ import annotations

import argparse
import collections
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from optimizer.settings.loading import load_settings  # noqa: E402
from optimizer.proposal.contrast import rule_to_complete  # noqa: E402
from optimizer.models import is_embedded  # noqa: E402
from optimizer.proposal.patch import LintIndex, check_prompt_text  # noqa: E402
from optimizer.proposal.llm import LLMProposer  # noqa: E402
from optimizer.proposal.proposers import ProposalRequest  # noqa: E402
from optimizer.registry import get_agent  # noqa: E402
from optimizer.proposal.request import Selection, failure_records, load_manual, render_request, select_targets  # noqa: E402
from optimizer.trials.runner import Runner, plan  # noqa: E402
from optimizer.store import Store, default_url  # noqa: E402
from optimizer.suites import load_suites  # noqa: E402
from optimizer.proposal.targets import prefers_named  # noqa: E402
from optimizer.types import Trial  # noqa: E402

FRESH_OFFSET = 10_000
"""Screening trials start here, past any baseline index."""


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="card_agent")
    parser.add_argument("--agent-model", default="mock/sim")
    parser.add_argument("--patcher-model", default="mock/patcher")
    parser.add_argument("--skill", type=float, default=0.3, help="mock/patcher's skill (ignored by real models)")
    parser.add_argument("--full", default="auto", choices=["auto", "edits", "rule"],
                        help="the full request's patch format (auto: rule for local/* patchers, else edits)")
    parser.add_argument("--buckets", type=int, default=3, help="the worst this many train buckets")
    parser.add_argument("--n", type=int, default=8, help="proposals per bucket and protocol")
    parser.add_argument("--baseline-trials", type=int, default=2)
    parser.add_argument("--fresh", type=int, default=4, help="screening trials per train task of the bucket")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bucket", default=None,
                        help="screen this train bucket only (whatever the baseline ranks first)")
    parser.add_argument("--protocols", default="full,contrast",
                        help="which protocols to run, comma-separated: full, contrast (both by default)")
    return parser.parse_args()


class Bench:
    def __init__(self, args: argparse.Namespace, scratch: Path):
        self.args = args
        self.scratch = scratch
        self.settings = load_settings(ROOT).model_copy(update={
            "agent_model": args.agent_model, "judge_model": args.agent_model, "patcher_model": args.patcher_model,
            "seed": args.seed, "cache": False, "state_dir": str(scratch / "state")})
        self.suites = load_suites([args.suite], ROOT)
        self.agent = get_agent(self.suites[0].spec.agent_name)
        self.base = (ROOT / self.agent.prompt_file).read_text(encoding="utf-8")
        self.store = Store(default_url(scratch / "store"))
        self.lint = LintIndex.from_suites(self.suites)
        self.in_process = args.agent_model.startswith("mock/")

    def run(self, prompt: str, planned) -> list[Trial]:
        root = self.scratch / "prompts" / str(abs(hash(prompt)))
        if not root.exists():
            shutil.copytree(ROOT / "agents" / "prompts", root / "agents" / "prompts")
            (root / self.agent.prompt_file).write_text(prompt, encoding="utf-8")
        runner = Runner(self.settings.runner, self.store, project_root=ROOT, prompt_root=root,
                        in_process=self.in_process)
        return runner.run(self.suites, planned).trials

    def screen(self, prompt: str, bucket: str) -> float:
        planned = [replace(item, index=item.index + FRESH_OFFSET, reserve=False)
                   for item in plan(self.suites, trials=self.args.fresh)
                   if item.task.bucket == bucket and item.task.split == "train"]
        trials = [t for t in self.run(prompt, planned) if t.status != "errored"]
        return statistics.fmean(t.score or 0.0 for t in trials) if trials else float("nan")

    def propose(self, request: str, protocol: str, ordinal: int) -> tuple[str | None, str]:
        """The patched prompt (None when there is none) and what became of the proposal."""
        workdir = self.scratch / "box" / f"{protocol}-{ordinal}"
        shutil.rmtree(workdir, ignore_errors=True)
        (workdir / Path(self.agent.prompt_file).parent).mkdir(parents=True)
        (workdir / self.agent.prompt_file).write_text(self.base, encoding="utf-8")
        subprocess.run(["git", "init", "-q", str(workdir)], check=True)
        proposer = LLMProposer(self.args.patcher_model, skill=self.args.skill, seed=self.args.seed,
                               sample_temperature=self.settings.patcher_temperature, patch_format=protocol,
                               retry_attempts=self.settings.retry_attempts)
        proposal = proposer.propose(ProposalRequest(
            request=request, request_path=workdir / "request.md", prompt_file=self.agent.prompt_file,
            workdir=workdir, ordinal=ordinal, sample=True, check=self.check))
        patched = (workdir / self.agent.prompt_file).read_text(encoding="utf-8")
        if proposal.error or patched == self.base:
            return None, f"error: {(proposal.error or 'the prompt file was left unchanged').splitlines()[0][:160]}"
        return (patched, "screened") if self.check(patched) is None else (None, "refused")

    def check(self, patched: str) -> str | None:
        found = check_prompt_text(prompt_file=self.agent.prompt_file, base_prompt=self.base, patched=patched,
                                  max_changed_lines=self.settings.max_changed_lines, index=self.lint)
        return None if found.passed else found.reason


def main() -> None:
    args = arguments()
    with tempfile.TemporaryDirectory(prefix="patcher-quality-") as folder:
        bench = Bench(args, Path(folder))
        baseline = bench.run(bench.base, plan(bench.suites, trials=args.baseline_trials))
        worst = select_targets(baseline, bench.suites, max_targets=10_000 if args.bucket else args.buckets,
                               prefer_named=prefers_named(bench.settings.target_order,
                                                          bench.settings.agent_model))
        full = args.full if args.full != "auto" else ("rule" if is_embedded(args.patcher_model) else "edits")
        print(f"{args.suite}: agent {args.agent_model}, patcher {args.patcher_model}, full request's format {full!r}, "
              f"{len(baseline)} baseline trials, N={args.n}, {args.fresh} fresh trials per task")
        chosen = [full if name == "full" else name for name in args.protocols.split(",")]
        totals = {protocol: [0, 0] for protocol in chosen}
        manual = load_manual(ROOT, worst.agent)
        targets = worst.targets
        if args.bucket:
            targets = [target for target in worst.targets if target.bucket == args.bucket]
            if not targets:
                raise SystemExit(f"--bucket {args.bucket}: no failing train bucket of that name in the baseline")
        for target in targets:
            selection = Selection(worst.agent, worst.suite_names, [target], [])
            failures = failure_records(baseline, bench.suites, selection)
            base_score = bench.screen(bench.base, target.bucket)
            print(f"\n{target.bucket}: base prompt {base_score:.3f} on fresh trials "
                  f"({target.failed}/{target.trials} baseline trials failed)")
            for protocol in chosen:
                request, _ = render_request(
                    selection=selection, failures=failures, prompt=bench.base, prompt_file=bench.agent.prompt_file,
                    manual=manual, iteration_id="patcher-quality", base_commit="0" * 40,
                    agent_model=args.agent_model, max_changed_lines=bench.settings.max_changed_lines,
                    token_budget=bench.settings.request_token_budget, patch_format=protocol)
                form = "guided" if rule_to_complete(request) else "free" if protocol == "contrast" else ""
                outcomes, effects = [], []
                for ordinal in range(1, args.n + 1):
                    patched, outcome = bench.propose(request, protocol, ordinal)
                    if patched is not None:
                        effects.append(bench.screen(patched, target.bucket) - base_score)
                    outcomes.append(outcome)
                above = sum(effect > 0 for effect in effects)
                totals[protocol][0] += above
                totals[protocol][1] += args.n
                best = f"{max(effects):+.3f}" if effects else "none screened"
                errors = collections.Counter(outcome for outcome in outcomes if outcome.startswith("error"))
                print(f"  {protocol:8} {form:6} request {len(request):6,} chars: {sum(errors.values())} errors, "
                      f"{outcomes.count('refused')} refused by the checks, {above}/{args.n} screened above base, "
                      f"best candidate {best}")
                for reason, count in errors.most_common():
                    print(f"    {count} x {reason}")
        print()
        for protocol, (above, asked) in totals.items():
            print(f"{protocol}: {above}/{asked} proposals screened above base ({above / max(asked, 1):.0%})")


if __name__ == "__main__":
    main()
