"""`optimizer judges ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from optimizer.cli._paths import output_file

app = typer.Typer(no_args_is_help=True, help="Calibrate the LLM judges against their human labels.")


@app.command("calibrate")
def calibrate_command(
    judge_model: Optional[str] = typer.Option(None, help="Model to calibrate (env OPTIMIZER_JUDGE_MODEL)."),
    judge: Optional[list[str]] = typer.Option(None, "--judge", help="Only this judge (repeatable; default all)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Ask the model even for answers already stored."),
    json_path: Optional[Path] = typer.Option(None, "--json", callback=output_file, help="Write the report as JSON here."),
    fail_under: Optional[float] = typer.Option(None, min=-1.0, max=1.0,
                                               help="Exit 1 when a judge's Spearman is below this (-1 to 1)."),
    judge_form: str = typer.Option("auto", help="auto (the form runs on this model use: one criterion per call "
                                                "on the embedded model, the whole rubric otherwise), rubric or "
                                                "criteria. A calibration counts for the form it measured."),
) -> None:
    """Run each judge over its labelled examples; report Spearman correlation and pass/fail agreement."""
    from optimizer.trials import calibration
    from optimizer.cli._common import project_settings
    from optimizer.errors import EXIT_FAILED, InputError
    from optimizer.trials.judging import JudgeSettings, judges
    from optimizer.models import validate_model
    from optimizer.store import open_store

    root, settings = project_settings(judge_model=judge_model, cache=False if no_cache else None)
    validate_model(settings.judge_model, field="judge_model")
    known = judges()
    names = judge or sorted(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InputError(f"unknown judge {', '.join(unknown)} (known: {', '.join(sorted(known))})",
                         field="--judge", fix="pick one of the known judges")
    for name in names:
        calibration.load_examples(known[name])  # bad example files fail before any model call
    store = open_store(settings, root)
    if judge_form not in ("auto", "rubric", "criteria"):
        raise InputError(f"unknown judge form {judge_form!r}", field="--judge-form",
                         fix="use auto, rubric or criteria")
    without = [name for name in names if judge_form == "criteria" and not known[name].criteria]
    if without:
        raise InputError(f"judge {', '.join(without)} has no criteria", field="--judge-form",
                         fix="use --judge-form rubric or auto for it")
    judge_settings = JudgeSettings(model=settings.judge_model, cache=store.cache if settings.cache else None,
                                   retry_attempts=settings.retry_attempts, form=judge_form)
    reports = _calibrate(settings, store, [(name, known[name]) for name in names], judge_settings)
    store.close()
    if json_path:
        _write_reports(json_path, settings.judge_model, known, judge_form, reports)
    if fail_under is not None and any(r.spearman is None or r.spearman < fail_under for r in reports):
        raise typer.Exit(EXIT_FAILED)


def _calibrate(settings, store, chosen: list[tuple[str, Any]], judge_settings) -> list:
    """Each chosen judge, as (name, entry), calibrated and its report saved, with a progress line
    every five examples; then the table of their results on the console."""
    from rich.table import Table

    from optimizer.trials import calibration
    from optimizer.cli._common import console, recording
    from optimizer.trials.judging import CALIBRATION_BAR

    table = Table(title=f"judge calibration on {settings.judge_model}", title_justify="left")
    for column in ("judge", "form", "examples", "errored", "Spearman", "agreement", "verdict"):
        table.add_column(column, justify="left" if column in ("judge", "form", "verdict") else "right")
    reports = []
    for name, entry in chosen:
        done = []

        def progress(row, name=name, done=done):
            done.append(row)
            if len(done) % 5 == 0:
                console.print(f"{name}: {len(done)} examples judged", highlight=False)

        with recording(settings, store):
            report = calibration.calibrate(entry, judge_settings, on_example=progress)
        calibration.save(store, report)
        reports.append(report)
        verdict = ("[yellow]FLAGGED[/yellow] below " if report.flagged else "[green]ok[/green] meets ") + \
            f"{CALIBRATION_BAR}"
        table.add_row(name, entry.form_for(settings.judge_model, judge_settings.form), str(len(report.rows)),
                      str(report.errored),
                      "–" if report.spearman is None else f"{report.spearman:.2f}",
                      "–" if report.agreement is None else f"{report.agreement:.0%}", verdict)
    console.print(table)
    return reports


def _write_reports(path: Path, model: str, known: dict, judge_form: str, reports: list) -> None:
    """The calibration reports as JSON, every labelled example's row included."""
    from optimizer.files import write_json
    from optimizer.trials.judging import CALIBRATION_BAR

    write_json(path, {"model": model, "bar": CALIBRATION_BAR, "judges": [
        {"judge": r.judge, "form": known[r.judge].form_for(model, judge_form),
         "rubric_hash": r.rubric_hash, "examples": len(r.rows), "errored": r.errored,
         "spearman": r.spearman, "agreement": r.agreement, "flagged": r.flagged, "rows": r.rows,
         "usage": r.usage.model_dump()} for r in reports]})
