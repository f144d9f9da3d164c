"""A stand-in coding agent for benchmarks: reads request.md, finds the targeted buckets, and
appends the general rule `mock/sim` recognises for each (the `rule` texts of the agent's
sim_rules.json, e.g. agents/card/sim_rules.json) to the prompt file. Always right: for a patcher
that is not, see `mock_patcher_skill`.

Usage (as a `proposer_command`): python benchmarks/sim_patcher.py {request} {workdir} [PROMPT_FILE]
(without PROMPT_FILE, the file the request says to edit).
"""

import re
import sys
from pathlib import Path

from optimizer.proposal.weak_patcher import AGENT, rule_texts_for, targeted_buckets


def main(request_path: str, workdir: str, prompt_file: str | None = None) -> int:
    request = Path(request_path).read_text(encoding="utf-8")
    if prompt_file is None:
        named = re.search(r"Edit only `([^`]+)`", request)
        if not named:
            print("the request names no prompt file", file=sys.stderr)
            return 1
        prompt_file = named.group(1)
    targets = targeted_buckets(request)
    agent = AGENT.search(request)
    texts = rule_texts_for(targets, agent.group(1) if agent else None)
    if texts is None:
        print("no known rule for the targeted buckets", file=sys.stderr)
        return 1
    rules = [f"- {texts.rules[bucket]}" for bucket in targets]
    path = Path(workdir) / prompt_file
    path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(rules) + "\n", encoding="utf-8")
    print(f"added the general rule for {', '.join(targets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
