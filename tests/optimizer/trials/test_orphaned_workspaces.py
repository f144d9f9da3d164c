"""Trial workspaces left by a killed process are removed by the next run on the machine."""

from __future__ import annotations

import os
import subprocess
import sys

from optimizer.trials.runner import WORKSPACE_PREFIX, remove_orphaned_workspaces


def test_only_the_workspaces_of_processes_that_are_gone_are_removed(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folders = {name: tmp_path / name for name in (
            f"{WORKSPACE_PREFIX}{gone.pid}-abc", f"{WORKSPACE_PREFIX}{running.pid}-def",
            f"{WORKSPACE_PREFIX}{os.getpid()}-ghi", f"{WORKSPACE_PREFIX}k2j3h4", "someone-elses")}
        for folder in folders.values():
            (folder / "PKM").mkdir(parents=True)
            (folder / "PKM" / "note.md").write_text("x")
        remove_orphaned_workspaces(str(tmp_path))
        assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
            name for name in folders if not name.startswith(f"{WORKSPACE_PREFIX}{gone.pid}-"))
    finally:
        running.kill()
        running.wait()
