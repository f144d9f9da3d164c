"""Options `run` and `nightly` share: the trials per task and the gate's budget, each a setting
of the same name (docs/settings.md)."""

from __future__ import annotations

import typer

from optimizer.settings.sources import setting_default

TRIALS = typer.Option(None, help=f"Trials per task (default: loop_trials = {setting_default('loop_trials')}).")
MAX_ROLLOUTS = typer.Option(
    None, help=f"Trials the gate may run per proposal, both prompts (default {setting_default('max_rollouts')}).")
BATCH_PAIRS = typer.Option(
    None, help=f"Fresh pairs per target between two looks of the gate (default {setting_default('batch_pairs')}).")
MIN_BUCKET_PAIRS = typer.Option(
    None, help=f"Pairs every other bucket gets before its harm test looks (default "
               f"{setting_default('min_bucket_pairs')}; docs/gate.md).")
SEARCH_ROLLOUTS = typer.Option(
    None, help=f"Screening budget of a search on the gepa engine before the gate (default "
               f"{setting_default('search_rollouts')}; docs/search.md).")
