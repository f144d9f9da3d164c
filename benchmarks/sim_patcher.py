"""A stand-in coding agent for benchmarks: reads request.md, finds the targeted bucket, and
appends the general rule `mock/sim` recognises for it (from sim_rules.json) to the prompt file.

Usage (as a `proposer_command`): python benchmarks/sim_patcher.py {request} {workdir} [PROMPT_FILE]
(without PROMPT_FILE, the file the request says to edit).
"""

import json
import re
import sys
from pathlib import Path

RULES = json.loads((Path(__file__).parent / "sim_rules.json").read_text(encoding="utf-8"))


def main(request_path: str, workdir: str, prompt_file: str | None = None) -> int:
    request = Path(request_path).read_text(encoding="utf-8")
    if prompt_file is None:
        named = re.search(r"Edit only `([^`]+)`", request)
        if not named:
            print("the request names no prompt file", file=sys.stderr)
            return 1
        prompt_file = named.group(1)
    targets = re.findall(r"^- \*\*[^/]+/([a-z_]+)\*\*:", request, flags=re.MULTILINE)
    rules = [RULES[bucket] for bucket in targets if bucket in RULES]
    if not rules:
        print("no known rule for the targeted buckets", file=sys.stderr)
        return 1
    path = Path(workdir) / prompt_file
    path.write_text(path.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(rules) + "\n", encoding="utf-8")
    print(f"added the general rule for {', '.join(targets)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
