"""The embedded store: runs, trials, grader results and the response cache, in one database."""

from optimizer.store.proposals import ProposalRow
from optimizer.store.store import Store, default_url, open_store

__all__ = ["ProposalRow", "Store", "default_url", "open_store"]
