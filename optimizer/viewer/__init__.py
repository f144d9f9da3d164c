"""`optimizer view`: a local, read-only web page over the store (docs/viewer.md)."""

from optimizer.viewer.reader import Reader, open_engine
from optimizer.viewer.server import ViewerServer

__all__ = ["Reader", "ViewerServer", "open_engine"]
