"""The JSON columns of the store's tables, written and read the same way by every reader (the
repositories through SQLAlchemy, `optimizer.store.quick` through sqlite3): a value named like a
JSON column without its `_json` suffix is stored as JSON text and read back decoded under that name."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Table


def encode(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """`values` as columns of `table`: a value named like a JSON column without its `_json`
    (`summary` for `summary_json`) goes into that column as JSON (a string as it is)."""
    columns = {}
    for key, value in values.items():
        if f"{key}_json" in table.c:
            key = f"{key}_json"
            if not isinstance(value, str) and value is not None:
                value = json.dumps(value, default=str, ensure_ascii=False)
        columns[key] = value
    return columns


def decode(row) -> dict[str, Any]:
    """A row as a dict whose JSON columns are decoded and named without `_json` (`summary`)."""
    record = dict(row)
    for key in list(record):
        if key.endswith("_json") and isinstance(record[key], str):
            record[key.removesuffix("_json")] = json.loads(record.pop(key))
    return record
