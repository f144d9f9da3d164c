"""The trials of a run, each with its grader results (tables `trials` and `grader_results`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from sqlalchemy import select

from optimizer.store import schema
from optimizer.store._repository import Repository

if TYPE_CHECKING:
    import pandas as pd

    from optimizer.types import GraderResult, Trial


class Trials(Repository):
    """Trials are written by the store's background writer, many to a transaction; a read sees
    every trial recorded before it."""

    def record(self, run_id: str, trial: Trial) -> None:
        self._store.enqueue("trial", (run_id, trial))

    def recorded(self, run_id: str) -> set[tuple[str, str, int]]:
        """(suite, task id, trial index) of every trial recorded under the run."""
        table = schema.trials
        with self._reading() as conn:
            rows = conn.execute(select(table.c.suite, table.c.task_id, table.c.trial_index)
                                .where(table.c.run_id == run_id)).all()
        return {(suite, task, index) for suite, task, index in rows}

    def load(self, run_id: str) -> list[Trial]:
        """The full trial records of a run, grader results included, in recording order."""
        from optimizer.types import GraderResult, Outcome, Transcript, Trial  # here: `optimizer history` skips them

        with self._reading() as conn:
            rows = conn.execute(select(schema.trials).where(schema.trials.c.run_id == run_id)
                                .order_by(schema.trials.c.id)).mappings().all()
            graders = conn.execute(select(schema.grader_results)
                                   .where(schema.grader_results.c.trial_id.in_([row["id"] for row in rows]))
                                   .order_by(schema.grader_results.c.id)).mappings().all() if rows else []
        by_trial: dict[int, list[GraderResult]] = {}
        for row in graders:
            by_trial.setdefault(row["trial_id"], []).append(GraderResult(
                grader=row["grader"], score=row["score"], passed=row["passed"], errored=row["errored"],
                rationale=row["rationale"], details=json.loads(row["details_json"])))
        return [Trial(suite=row["suite"], task_id=row["task_id"], bucket=row["bucket"], split=row["split"],
                      index=row["trial_index"], status=row["status"], score=row["score"], error=row["error"],
                      duration_s=row["duration_s"],
                      transcript=Transcript.model_validate_json(row["transcript_json"]),
                      outcome=Outcome.model_validate_json(row["outcome_json"]),
                      grader_results=by_trial.get(row["id"], []))
                for row in rows]

    def frame(self, run_id: str) -> pd.DataFrame:
        """A run's trials without their transcripts and outcomes."""
        columns = [c for c in schema.trials.c if c.name not in ("transcript_json", "outcome_json")]
        return self._frame(select(*columns).where(schema.trials.c.run_id == run_id).order_by(schema.trials.c.id))
