"""`optimizer view`."""

from __future__ import annotations

from pathlib import Path

import typer


def view_command(
    host: str = typer.Option("127.0.0.1", "--host", envvar="OPTIMIZER_VIEW_HOST",
                             help="Address to listen on; the default is this machine only."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, envvar="OPTIMIZER_VIEW_PORT",
                             help="Port to listen on (0: any free port)."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request."),
    export_to: Path = typer.Option(None, "--export", metavar="DIR",
                                   help="Write the pages as static HTML files into DIR instead of serving them "
                                        "(for a CI run's artifacts; open DIR/index.html)."),
    pages: int = typer.Option(2000, "--pages", help="With --export: at most this many pages, nights and "
                                                   "iterations first."),
) -> None:
    """Browse the store in a web browser, read-only.

    Nights, runs, trials with filters, transcripts, changed pairs, search, trends."""
    from optimizer.cli._common import console, err_console, project_settings
    from optimizer.store.address import store_url
    from optimizer.viewer import ViewerServer
    from optimizer.viewer.server import beyond_loopback

    root, settings = project_settings()
    if export_to is not None:
        from optimizer.viewer.export import export

        written, left_out = export(store_url(settings, root)[0], export_to, pages)
        console.print(f"wrote {written} page(s) to {export_to}/index.html"
                      + (f"; {left_out} more left out (--pages {pages})" if left_out else ""),
                      highlight=False, soft_wrap=True)
        return
    server = ViewerServer(store_url(settings, root)[0], host, port, verbose)
    console.print(f"viewing the store at http://{host}:{server.server_address[1]}/ (Ctrl-C stops)",
                  highlight=False, soft_wrap=True)
    if beyond_loopback(host):
        err_console.print(f"warning: listening on {host}, not this machine only: anyone who can reach it can read every "
                      f"trial's transcript (a PKM transcript holds the user's notes); the default is 127.0.0.1",
                      highlight=False, soft_wrap=True, style="yellow")
    try:
        server.serve_forever()
    finally:
        server.server_close()
