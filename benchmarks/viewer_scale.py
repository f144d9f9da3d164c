"""Viewer scale: `optimizer view`'s pages over a store of 10,000 trials.

Builds a SQLite store of one iteration (a baseline and a candidate of 5,000 trials each, every
trial with a full transcript and a grader result; 1,250 pairs changed outcome), serves it on a
free loopback port and times each page over HTTP, including the transfer: min and median of
several loads after one untimed warm-up; then `optimizer view --export` of the same store.
Target: the first page under 1 s.

    python benchmarks/viewer_scale.py [--trials 10000] [--loads 9]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from optimizer.store import Store, default_url  # noqa: E402
from optimizer.viewer import ViewerServer  # noqa: E402
from optimizer.viewer.export import export  # noqa: E402
from tests.viewer_store import add_reusing_night, build  # noqa: E402

TRIALS_PER_TASK = 4


def timed(url: str, loads: int) -> dict[str, float]:
    urllib.request.urlopen(url).read()
    seconds = []
    for _ in range(loads):
        start = time.perf_counter()
        with urllib.request.urlopen(url) as reply:
            reply.read()
        seconds.append(time.perf_counter() - start)
    return {"min_s": round(min(seconds), 4), "median_s": round(statistics.median(seconds), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000, help="trials in the store (two runs of half each)")
    parser.add_argument("--loads", type=int, default=9, help="timed loads of each page")
    parser.add_argument("--export-pages", type=int, default=500, help="pages `optimizer view --export` writes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store(default_url(Path(folder)))
        start = time.perf_counter()
        build(store, tasks=args.trials // 2 // TRIALS_PER_TASK, trials_per_task=TRIALS_PER_TASK)
        add_reusing_night(store)
        store.close()
        built_s = time.perf_counter() - start
        server = ViewerServer(default_url(Path(folder)), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        pages = {"first page /": "/", "run page (first 50 trials)": "/run/base-0",
                 "run page filtered (outcome=passed&task=task_1)": "/run/base-0?outcome=passed&task=task_1",
                 "trial page": "/trial/5000", "changed pairs (first 10)": "/pairs/it-0?proposal=1",
                 "changed pairs of one bucket that rose": "/pairs/it-0?proposal=1&bucket=fact_preservation&direction=up",
                 "iteration page (gate table)": "/iteration/it-0", "night page": "/night/night-0",
                 "search, a word in every transcript (first 50)": "/search?q=Standup",
                 "search, a word in none (every transcript read)": "/search?q=no-such-word-anywhere",
                 "trends": "/trends"}
        timings = {name: timed(base + path, args.loads) for name, path in pages.items()}
        server.shutdown()
        server.server_close()
        start = time.perf_counter()
        written, left_out = export(default_url(Path(folder)), Path(folder) / "export", args.export_pages)
        exported = {"pages": written, "left_out": left_out, "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps({"trials": args.trials, "store_built_s": round(built_s, 1), "loads": args.loads,
                      "pages": timings, "export": exported}, indent=2))


if __name__ == "__main__":
    main()
