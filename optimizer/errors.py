"""Typed errors. Each carries the file and field it is about; the CLI maps them to exit codes."""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_HARNESS = 3


def first_line(text: str, default: str = "") -> str:
    """The first non-blank line of an error text (never the traceback some libraries quote below it)."""
    return (text.strip().splitlines() or [default])[0]


class OptimizerError(Exception):
    """Base class of every error the harness raises on purpose."""

    exit_code = EXIT_HARNESS

    def __init__(self, message: str, *, path: Path | str | None = None, field: str | None = None,
                 fix: str | None = None):
        self.path = str(path) if path is not None else None
        self.field = field
        self.fix = fix
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        where = self.path or ""
        if self.field:
            where = f"{where}: field '{self.field}'" if where else f"field '{self.field}'"
        text = f"{where}: {self.message}" if where else self.message
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class InputError(OptimizerError):
    """Bad input or configuration: exit code 2, nothing written."""

    exit_code = EXIT_BAD_INPUT


class TaskFileError(InputError):
    """A task file is malformed or inconsistent."""


class SuiteError(InputError):
    """A suite folder or suite.json is malformed, or a suite cannot be found."""


class GraderConfigError(InputError):
    """Unknown grader name or a grader config of the wrong shape."""


class ModelConfigError(InputError):
    """Unknown model string, missing key, or a bad role setting."""


class ConfigError(InputError):
    """Bad settings in pyproject.toml / optimizer.toml / environment / flags."""


class HarnessError(OptimizerError):
    """The harness itself failed (exit code 3)."""


class StoreError(HarnessError):
    """The store failed under the harness (a corrupt file, a full disk, a database gone away):
    the run stops (exit code 3), and no trial is recorded as errored because of it."""


class ModelCallError(OptimizerError):
    """A model call failed after all retries; the trial that made it is errored."""


class TrialTimeout(OptimizerError):
    """A trial ran past its wall-clock limit. Raised as itself when the model did not answer in
    time (a call still waiting, or a failing call still being retried, at the deadline): the
    provider's fault, so the trial is errored."""


class TrialCutShort(OptimizerError):
    """The agent's own run ended its trial before the job was done: it used all its turns, or the
    deadline passed while the model kept answering. The trial is *failed* with score 0 and its
    ending (the message) recorded; counted as errored it would drop out of every score, and a
    patch that makes the agent loop would hide its own failures."""


class DeadlinePassed(TrialCutShort, TrialTimeout):
    """The trial's deadline passed between model calls, every call so far answered."""
