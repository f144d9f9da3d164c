"""Where the prompt manual that ships with the optimizer is.

In a checkout (an editable install included) it is the repository's `prompt_manual/` folder; the
wheel installs that folder as `optimizer/prompt_manual/` (pyproject's `package-dir`), since a
top-level data folder has no place in site-packages. The harness reads its own texts there (the
contrast patcher's `patcher_contrast/`), and a project without a `prompt_manual/` of its own
sends this one (`optimizer.proposal.request.load_manual`).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
"""The `optimizer` package's folder."""


def shipped_manual() -> Path:
    """The installed copy when there is one, else the checkout's folder."""
    installed = PACKAGE / "prompt_manual"
    return installed if installed.is_dir() else PACKAGE.parent / "prompt_manual"
