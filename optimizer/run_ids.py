"""The names runs and iterations are stored under: `<UTC date>-<UTC time>-<6 hex digits>`, e.g.
`20261127-071305-3f9a1c`. They sort by start time, and the random tail keeps two runs started in
the same second apart. `RUN_ID` recognises one in text (the weak patcher leaves them out of what
it draws from), so the format is defined once, here.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

RUN_ID = re.compile(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")
"""Any id `new_run_id` makes."""


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
