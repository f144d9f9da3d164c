"""The `command` proposer: a coding-agent CLI the user already has, run in the proposal's box
under bubblewrap when it works here, in a process group of its own, with a timeout (see
`optimizer.proposal.proposers`)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile

from optimizer.errors import ConfigError
from optimizer.nightly.reaper import Reaper
from optimizer.proposal.box import (BOX_MARK, Confinement, confined, proposer_environment, record_owner,
                                    stop_marked, under_private_tmp)
from optimizer.proposal.proposers import Proposal, ProposalRequest

STOP_GRACE_S = 2.0
"""How long a proposer command has to exit after SIGTERM (on a timeout or Ctrl-C) before its
process group is killed."""
LOG_CHARS = 20000
"""The end of a proposer command's output kept as its log."""


class CommandProposer:
    name = "command"

    def __init__(self, template: str, *, timeout_s: float, confinement: Confinement = Confinement(None),
                 env: tuple[str, ...] | list[str] = ()):
        if "{request}" not in template:
            raise ConfigError("the proposer command must contain {request}", field="proposer_command",
                              fix="e.g. proposer_command = \"my-agent --prompt-file {request} --cwd {workdir}\"")
        self.template = template
        self.timeout_s = timeout_s
        self.bwrap = confinement.bwrap
        self.note = confinement.note
        self.confined = confinement.bwrap is not None
        self.env = tuple(env)
        """Names the command's environment keeps beside `box.PASSED` (`proposer_env`)."""

    def propose(self, request: ProposalRequest) -> Proposal:
        command = self.template.replace("{request}", shlex.quote(str(request.request_path))) \
                               .replace("{workdir}", shlex.quote(str(request.workdir)))
        proposal = Proposal()
        argv = ["bash", "-c", command]
        if self.bwrap:
            writable = request.box.folder if request.box else request.workdir
            argv = confined([self.bwrap], argv, writable=[writable.resolve()],
                            readable=[*under_private_tmp(self.template), request.request_path.resolve()],
                            workdir=request.workdir.resolve())
        env = proposer_environment(request.box.home if request.box else None, self.env)
        if request.box:
            env[BOX_MARK] = str(request.box.folder.resolve())
        with Reaper() as reaper, tempfile.TemporaryFile() as output:
            process = subprocess.Popen(argv, cwd=request.workdir, stdin=subprocess.DEVNULL, env=env,
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
            if request.box:
                record_owner(request.box, process.pid)
            try:
                code = process.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            finally:  # also on Ctrl-C, SIGTERM, SIGHUP: the command's own session does not get those signals
                _stop_group(process)
                strays = reaper.stop_strays(group=process.pid)
                if request.box:  # also what left our tree (found by the box its environment names)
                    strays = sorted({*strays, *stop_marked([request.box.folder.resolve()])})
            proposal.log = _tail(output)
        if code is None:
            proposal.error = f"the proposer command timed out after {self.timeout_s:g} s; its changes are not used"
        elif code < 0:
            proposal.error = f"the proposer command was killed by signal {-code}; its changes are not used"
        elif code != 0:
            proposal.error = f"the proposer command failed with exit code {code}; its changes are not used"
        proposal.rationale = _last_paragraph(proposal.log)
        proposal.log += _strays_note(strays)
        return proposal


def _stop_group(process: subprocess.Popen) -> None:
    """End the command and everything it started (its process group): after a timeout or Ctrl-C,
    and after a normal exit too, so nothing it left running changes the clone while the loop
    reads it. SIGTERM to the group, up to `STOP_GRACE_S` for the command itself to exit, then
    SIGKILL to whatever is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:  # the command exited and left nothing running
        process.wait()
        return
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _strays_note(strays: list[int]) -> str:
    if not strays:
        return ""
    return (f"\n[optimizer] the proposer command left {len(strays)} process(es) running outside its process "
            f"group (pids {', '.join(map(str, strays))}); they were killed before its clone was read\n")


def _tail(output) -> str:
    size = os.fstat(output.fileno()).st_size
    output.seek(max(0, size - 4 * LOG_CHARS))
    return output.read().decode("utf-8", errors="replace")[-LOG_CHARS:]


def _last_paragraph(text: str) -> str:
    paragraphs = [part.strip() for part in text.strip().split("\n\n") if part.strip()]
    return paragraphs[-1][:2000] if paragraphs else ""
