"""The judge_calibrations table: how well each judge's scores agreed with labelled examples."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import insert, select

from optimizer.store import schema
from optimizer.store._repository import Repository, decode, encode


class Calibrations(Repository):
    """A judge is calibrated per model and per wording of its rubric (`rubric_hash`); the latest
    calibration of the three counts."""

    def record(self, *, judge: str, model: str, rubric_hash: str, examples: int, errored: int,
               spearman: float | None, agreement: float | None, rows: list[dict[str, Any]]) -> None:
        values = encode(schema.judge_calibrations, dict(
            judge=judge, model=model, rubric_hash=rubric_hash, examples=examples, errored=errored,
            spearman=spearman, agreement=agreement, rows=rows))
        with self._writing() as conn:
            conn.execute(insert(schema.judge_calibrations).values(created_at=datetime.now(timezone.utc), **values))

    def latest(self, judge: str, model: str, rubric_hash: str) -> dict[str, Any] | None:
        table = schema.judge_calibrations
        with self._reading() as conn:
            row = conn.execute(select(table).where(table.c.judge == judge, table.c.model == model,
                                                   table.c.rubric_hash == rubric_hash)
                               .order_by(table.c.id.desc()).limit(1)).mappings().first()
        return decode(row) if row else None
