"""The `optimizer` command: a thin layer over library calls, one module per command group.

Errors are mapped to exit codes here and nowhere else: 0 ok, 1 completed but failed when asked
to fail, 2 bad input or configuration, 3 harness error; 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP.
"""

from __future__ import annotations

import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Iterator

import typer

from optimizer.cli import eval as eval_cmd
from optimizer.cli import gate as gate_cmd
from optimizer.cli import graduate as graduate_cmd
from optimizer.cli import history as history_cmd
from optimizer.cli import judges as judges_cmd
from optimizer.cli import loop as loop_cmd
from optimizer.cli import model as model_cmd
from optimizer.cli import nightly as nightly_cmd
from optimizer.cli import report as report_cmd
from optimizer.cli import review as review_cmd
from optimizer.cli import suites as suites_cmd
from optimizer.cli import view as view_cmd

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Closed-loop prompt optimizer: evaluate agents, propose prompt patches, gate them.")
app.command("eval")(eval_cmd.eval_command)
app.command("run")(loop_cmd.run_command)
app.command("review")(review_cmd.review_command)
app.command("noise")(loop_cmd.noise_command)
app.command("nightly")(nightly_cmd.nightly_command)
app.command("history")(history_cmd.history_command)
app.command("graduate")(graduate_cmd.graduate_command)
app.command("report")(report_cmd.report_command)
app.command("view")(view_cmd.view_command)
app.command("gate")(gate_cmd.gate_command)
app.add_typer(suites_cmd.app, name="suites")
app.add_typer(model_cmd.app, name="model")
app.add_typer(judges_cmd.app, name="judges")


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt: everything that ends a
    command cleanly on Ctrl-C (runs and iterations recorded `interrupted`, the proposer's box
    removed, its processes killed) then does so on these too. One class per signal, named after
    it, so the recorded reason says which (`SIGTERM: the process was asked to stop`)."""

    signum: int


class SIGTERM(StopSignal):  # noqa: N801
    signum = signal.SIGTERM


class SIGHUP(StopSignal):  # noqa: N801
    signum = signal.SIGHUP


STOPS = {cls.signum: cls for cls in (SIGTERM, SIGHUP)}


def main() -> None:
    from optimizer.errors import EXIT_HARNESS, OptimizerError
    from optimizer.settings.sources import check_environment

    stopped: list[StopSignal] = []
    try:
        with _stopping_on_signals(stopped):
            check_environment()
            code = app(standalone_mode=False)  # without standalone mode click returns an Exit's code
    except OptimizerError as exc:
        typer.secho(f"error: {exc.render()}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _exit_if_stopped(stopped)
        typer.secho("aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # usage errors carry their own exit code (2)
        if _is_usage_error(exc):
            exc.show()
            sys.exit(exc.exit_code)
        # Not an error the harness raises on purpose: a bug, or a fault the harness did not
        # foresee. The traceback is for the report; the exit code says "harness error", never
        # "completed but failed" (1), which a nightly job reads as a verdict.
        traceback.print_exc()
        typer.secho(f"error: unexpected {type(exc).__name__} (a harness error): {exc}", fg="red", err=True)
        sys.exit(EXIT_HARNESS)
    _exit_if_stopped(stopped)  # typer returns 130 for any KeyboardInterrupt
    sys.exit(code if isinstance(code, int) else 0)


def _exit_if_stopped(stopped: list[StopSignal]) -> None:
    if stopped:
        typer.secho(f"stopped by {type(stopped[0]).__name__}", err=True)
        sys.exit(128 + stopped[0].signum)


@contextmanager
def _stopping_on_signals(stopped: list[StopSignal]) -> Iterator[None]:
    """SIGTERM and SIGHUP (`kill`, `timeout`, systemd, `docker stop`, a CI cancel, a closed
    terminal) raise `StopSignal` while the command runs, kept in `stopped`; one that is ignored when
    the command starts (`nohup`) stays ignored. The first ends the command; later ones are let
    pass, so they do not cut its clean-up short (SIGKILL still ends it at once)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in STOPS}

    def stop(signum, frame):
        for each, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(each, lambda *_: None)  # a handler, not SIG_IGN, which children would inherit
        stopped.append(STOPS[signum]())
        raise stopped[0]

    for signum, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _is_usage_error(exc: Exception) -> bool:
    """A click exception, from click itself or from the copy of click that newer typer releases
    ship inside their own package (a different class with the same shape)."""
    import click

    if isinstance(exc, click.ClickException):
        return True
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__) and hasattr(exc, "show")
