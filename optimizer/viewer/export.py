"""`optimizer view --export DIR`: the viewer's pages as static HTML files, for a CI run's
artifacts or a pull request, where no server runs (as `inspect view bundle` does for Inspect).

The pages are rendered in process by the same code the server uses and crawled from the first
page, breadth first, so nights, iterations and their changed pairs come before the long lists of
single trials; links between written pages become relative file links, and a link to a page left
out by `--pages` goes to `not-exported.html`. The search box and the filter forms need a server
and are left out of the files.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import deque
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from optimizer.errors import InputError
from optimizer.files import write_text
from optimizer.viewer.pages import environment, render
from optimizer.viewer.reader import Reader, open_engine

LINK = re.compile(r'href="([^"]*)"')
FORM = re.compile(r"<form\b.*?</form>", re.S)
ITERATION = re.compile(r"^/iteration/([^/?]+)$")
LEFT_OUT = "not-exported.html"
DEFAULT_PAGES = 2000


def file_for(address: str) -> str:
    """The file (relative to the export's folder) of a page address: `/` -> `index.html`,
    `/run/abc` -> `run/abc.html`, one with a query -> `run/abc.<hash of the query>.html`."""
    parts = urlsplit(address)
    path = [quote(unquote(part), safe="") for part in parts.path.split("/") if part] or ["index"]
    stem = "/".join(path)
    if parts.query:
        stem += "." + hashlib.sha256(parts.query.encode()).hexdigest()[:10]
    return f"{stem}.html"


def _absolute(href: str, current: str) -> str | None:
    """The page address a link on `current` points to, or None for a link off the viewer."""
    href = href.replace("&amp;", "&")
    if href.startswith("?"):
        return urlsplit(current).path + href
    if href.startswith("/") and not href.startswith("//"):
        return href
    return None


class _Crawl:
    """The pages planned so far (at most `limit`), the queue of those not yet written, and the
    addresses linked to but left out."""

    def __init__(self, limit: int):
        self.limit = limit
        self.queue: deque[str] = deque(["/"])
        self.planned = {"/"}
        self.left_out: set[str] = set()

    def plan(self, target: str) -> None:
        """Plan the page at `target` while there is room; with an iteration's page, the address
        `optimizer review` names for its changed pairs (`/iterations/<id>/changed`), which no page
        links to."""
        addresses = [target]
        if found := ITERATION.match(target):
            addresses.append(f"/iterations/{found[1]}/changed")
        for address in addresses:
            if address not in self.planned and len(self.planned) < self.limit:
                self.planned.add(address)
                self.queue.append(address)

    def relinked(self, html: str, address: str) -> str:
        """`html` of the page at `address` without its forms, every link to a viewer page made a
        relative file link (a page not planned yet is planned while there is room)."""
        here = os.path.dirname(file_for(address)) or "."

        def relink(match: re.Match) -> str:
            target = _absolute(match.group(1), address)
            if target is None:
                return match.group(0)
            self.plan(target)
            if target not in self.planned:
                self.left_out.add(target)
                return f'href="{os.path.relpath(LEFT_OUT, here)}"'
            return f'href="{os.path.relpath(file_for(target), here)}"'

        return LINK.sub(relink, FORM.sub("", html))


def export(url: str, folder: Path, pages: int = DEFAULT_PAGES) -> tuple[int, int]:
    """Write up to `pages` pages of the store at `url` under `folder`; (written, left out)."""
    if pages < 1:
        raise InputError(f"--pages must be at least 1, not {pages}", field="--pages", fix="pass --pages 2000")
    engine = open_engine(url)  # a store it cannot read stops it before anything is written
    try:
        _prepare(folder)
        return _write(Reader(engine), folder, pages)
    finally:
        engine.dispose()


def _prepare(folder: Path) -> None:
    """Make `folder`, refusing a file or a folder of other files (nothing of the user's is overwritten)."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file, not a folder", path=folder, fix="give --export a folder to write into")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make the folder {folder}: {exc.strerror or exc}", path=folder,
                         fix="give --export a folder you can write to") from None
    if any(folder.iterdir()) and not (folder / "index.html").is_file():
        raise InputError(f"{folder} is not empty and holds no earlier export", path=folder,
                         fix="export into a new or empty folder, or one an earlier export wrote")


def _write(reader: Reader, folder: Path, pages: int) -> tuple[int, int]:
    env = environment()
    crawl = _Crawl(pages)
    written = 0
    while crawl.queue:
        address = crawl.queue.popleft()
        parts = urlsplit(address)
        _, html = render(env, reader, unquote(parts.path), dict(parse_qsl(parts.query)))
        write_text(folder / file_for(address), crawl.relinked(html, address))
        written += 1
    page = env.get_template("viewer/error.html.j2").render(
        title="Not exported", message=f"This export holds {written} pages; this one was left out. Run "
                                      "`optimizer view` on the store, or export again with a larger --pages.")
    write_text(folder / LEFT_OUT, crawl.relinked(page, "/" + LEFT_OUT))
    return written, len(crawl.left_out)
