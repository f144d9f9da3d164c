"""Judge calibration: run a judge over its human-labelled examples and compare.

Each judge ships JSON Lines of examples `{"id", "inputs", "label", "note"}` (label in [0, 1]).
`calibrate` asks the judge about every example on the given model and reports the Spearman rank
correlation with the labels and the pass/fail agreement at the judge's pass threshold (0.6). A
judge whose correlation is below 0.7 on a model, or that was never calibrated on it with the
current rubric, is flagged in every report of a run that used it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from optimizer.errors import InputError
from optimizer.files import check_json_depth, read_input
from optimizer.trials.judging import CALIBRATION_BAR, PASS_THRESHOLD, Judge, JudgeError, JudgeSettings, ask
from optimizer.types import Usage


@dataclass
class CalibrationReport:
    judge: str
    model: str
    rubric_hash: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    spearman: float | None = None
    agreement: float | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def errored(self) -> int:
        return sum(1 for row in self.rows if row["score"] is None)

    @property
    def flagged(self) -> bool:
        return self.spearman is None or self.spearman < CALIBRATION_BAR


def load_examples(judge: Judge) -> list[dict[str, Any]]:
    path = judge.calibration
    if path is None or not path.is_file():
        raise InputError(f"judge {judge.name!r} has no calibration examples", path=path,
                         fix="add a JSON Lines file of labelled examples next to the rubric")
    examples = []
    for number, line in enumerate(read_input(path, InputError).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        check_json_depth(line, path, InputError, field=where)
        try:
            example = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON: {exc.msg}", path=path, field=where,
                             fix="one JSON object per line") from None
        if not isinstance(example, dict):
            raise InputError(f"a JSON {type(example).__name__}, not an object", path=path, field=where,
                             fix="one JSON object per line")
        label, inputs = example.get("label"), example.get("inputs")
        if not isinstance(inputs, dict) or not all(isinstance(v, str) for v in inputs.values()):
            raise InputError("inputs must be an object of strings", path=path, field=f"{where}.inputs",
                             fix="give the judge's input fields as strings")
        if isinstance(label, bool) or not isinstance(label, (int, float)) or not 0 <= label <= 1:
            raise InputError("label must be a number from 0 to 1", path=path, field=f"{where}.label",
                             fix="label each example with the score a careful human gives it")
        examples.append({"id": str(example.get("id") or number), "inputs": inputs, "label": float(label)})
    if len(examples) < 3:
        raise InputError(f"only {len(examples)} calibration examples", path=path,
                         fix="label at least 3 (about 20 give a useful correlation)")
    return examples


def calibrate(judge: Judge, settings: JudgeSettings,
              on_example: Callable[[dict[str, Any]], None] | None = None) -> CalibrationReport:
    report = CalibrationReport(judge=judge.name, model=settings.model,
                               rubric_hash=judge.wording_hash(judge.form_for(settings.model, settings.form)))
    for example in load_examples(judge):
        row = {"id": example["id"], "label": example["label"], "score": None, "error": None}
        try:
            verdict = ask(judge, example["inputs"], settings)
            row["score"] = verdict.score
            report.usage.add(verdict.usage)
        except JudgeError as exc:
            row["error"] = str(exc)
        report.rows.append(row)
        if on_example:
            on_example(row)
    scored = [row for row in report.rows if row["score"] is not None]
    if len(scored) >= 3:
        from scipy.stats import spearmanr

        value = spearmanr([r["label"] for r in scored], [r["score"] for r in scored]).statistic
        report.spearman = None if math.isnan(value) else float(value)
        agree = [(r["label"] >= PASS_THRESHOLD) == (r["score"] >= PASS_THRESHOLD) for r in scored]
        report.agreement = sum(agree) / len(agree)
    return report


def save(store, report: CalibrationReport) -> None:
    store.calibrations.record(judge=report.judge, model=report.model, rubric_hash=report.rubric_hash,
                              examples=len(report.rows), errored=report.errored, spearman=report.spearman,
                              agreement=report.agreement, rows=report.rows)


def judge_status(store, judge_names: list[str], model: str) -> list[dict[str, Any]]:
    """Per judge used in a run: its latest calibration on `model` with the current rubric, and
    whether its verdicts are flagged (uncalibrated, or Spearman below 0.7)."""
    from optimizer.trials.judging import get_judge

    status = []
    for name in sorted(set(judge_names)):
        judge = get_judge(name)
        wording = judge.wording_hash(judge.form_for(model))  # the form a run on `model` asks in
        record = store.calibrations.latest(name, model, wording)
        spearman = record["spearman"] if record else None
        flagged = spearman is None or spearman < CALIBRATION_BAR
        if record is None:
            reason = f"not calibrated on {model}: run `optimizer judges calibrate --judge-model {model}`"
        elif spearman is None:
            reason = f"calibration on {model} gave no correlation"
        else:
            reason = f"Spearman {spearman:.2f} on {model} ({'below' if flagged else 'meets'} the {CALIBRATION_BAR} bar)"
        status.append({"judge": name, "model": model, "rubric_hash": wording, "spearman": spearman,
                       "agreement": record["agreement"] if record else None, "flagged": flagged,
                       "calibrated_at": str(record["created_at"]) if record else None, "reason": reason})
    return status
