"""The embedded store: runs, trials, grader results and the response cache, in one database.

Its names are imported on first use, so a module of the package that needs no SQLAlchemy
(`optimizer.store.quick`) can be imported without it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optimizer.store.address import default_url
    from optimizer.store.proposals import ProposalRow
    from optimizer.store.store import Store, open_store

_HOMES = {"ProposalRow": "optimizer.store.proposals", "Store": "optimizer.store.store",
          "default_url": "optimizer.store.address", "open_store": "optimizer.store.store"}

__all__ = ["ProposalRow", "Store", "default_url", "open_store"]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
