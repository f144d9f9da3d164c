"""The `optimizer` command: a thin layer over library calls, one module per command group.

Errors are mapped to exit codes here and nowhere else: 0 ok, 1 completed but failed when asked
to fail, 2 bad input or configuration, 3 harness error.
"""

from __future__ import annotations

import sys
import traceback

import typer

from optimizer.cli import eval as eval_cmd
from optimizer.cli import graduate as graduate_cmd
from optimizer.cli import history as history_cmd
from optimizer.cli import judges as judges_cmd
from optimizer.cli import loop as loop_cmd
from optimizer.cli import model as model_cmd
from optimizer.cli import nightly as nightly_cmd
from optimizer.cli import report as report_cmd
from optimizer.cli import suites as suites_cmd

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Closed-loop prompt optimizer: evaluate agents, propose prompt patches, gate them.")
app.command("eval")(eval_cmd.eval_command)
app.command("run")(loop_cmd.run_command)
app.command("review")(loop_cmd.review_command)
app.command("noise")(loop_cmd.noise_command)
app.command("nightly")(nightly_cmd.nightly_command)
app.command("history")(history_cmd.history_command)
app.command("graduate")(graduate_cmd.graduate_command)
app.command("report")(report_cmd.report_command)
app.add_typer(suites_cmd.app, name="suites")
app.add_typer(model_cmd.app, name="model")
app.add_typer(judges_cmd.app, name="judges")


def main() -> None:
    from optimizer.config import check_environment
    from optimizer.errors import EXIT_HARNESS, OptimizerError

    try:
        check_environment()
        code = app(standalone_mode=False)  # without standalone mode click returns an Exit's code
    except OptimizerError as exc:
        typer.secho(f"error: {exc.render()}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
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
    sys.exit(code if isinstance(code, int) else 0)


def _is_usage_error(exc: Exception) -> bool:
    """A click exception, from click itself or from the copy of click that newer typer releases
    ship inside their own package (a different class with the same shape)."""
    import click

    if isinstance(exc, click.ClickException):
        return True
    return any(cls.__name__ == "ClickException" for cls in type(exc).__mro__) and hasattr(exc, "show")
