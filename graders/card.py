"""Card Agent graders: they read the saved card (the Outcome), never the chat reply."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from optimizer import GraderResult, Task, Trial, grader


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TemplateChoiceConfig(_Config):
    expected_template_ids: list[str] = Field(min_length=1)
    """Acceptable templates (a set): any of them as primary earns full credit."""
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    """Pass when the score reaches this (0.5: an acceptable template as a secondary config passes)."""


class MustContainConfig(_Config):
    substrings: list[str] = Field(min_length=1)
    case_sensitive: bool = False


class TagsConfig(_Config):
    expected_tags: list[str] = Field(min_length=1)


def _state(trial: Trial) -> dict:
    return trial.outcome.environment_state


@grader("card_completion", version="1", agent="card_agent")
def card_completion(task: Task, trial: Trial, config: BaseModel) -> GraderResult:
    state = _state(trial)
    checks = {
        "save succeeded": bool(state.get("saved")),
        "status completed": state.get("status") == "completed",
        "title present": bool(state.get("title")),
        "at least one ui_config": bool(state.get("template_ids")),
        "fact_id matches input": bool(state.get("fact_id")) and state.get("fact_id") == state.get("expected_fact_id"),
    }
    score = sum(checks.values()) / len(checks)
    failed = [name for name, ok in checks.items() if not ok]
    rationale = "all 5 checks passed" if not failed else f"{len(failed)} of 5 checks not met: " + ", ".join(
        f"'{name}'" for name in failed)
    return GraderResult(grader="card_completion", score=score, passed=score == 1.0, rationale=rationale,
                        details={"checks": checks})


@grader("card_template_choice", config=TemplateChoiceConfig, version="1", agent="card_agent")
def card_template_choice(task: Task, trial: Trial, config: TemplateChoiceConfig) -> GraderResult:
    chosen = _state(trial).get("template_ids") or []
    acceptable = set(config.expected_template_ids)
    if chosen and chosen[0] in acceptable:
        score, why = 1.0, f"primary template {chosen[0]!r} is acceptable"
    elif acceptable & set(chosen[1:]):
        score, why = 0.5, f"primary {chosen[0]!r} is not acceptable; an acceptable template appears later"
    else:
        score, why = 0.0, f"templates {chosen or 'none'} include none of {sorted(acceptable)}"
    return GraderResult(grader="card_template_choice", score=score, passed=score >= config.min_score, rationale=why,
                        details={"chosen": chosen, "acceptable": sorted(acceptable)})


@grader("card_must_contain", config=MustContainConfig, version="1", agent="card_agent")
def card_must_contain(task: Task, trial: Trial, config: MustContainConfig) -> GraderResult:
    raw = _state(trial).get("raw_yaml") or ""
    haystack = raw if config.case_sensitive else raw.lower()
    missing = [s for s in config.substrings if (s if config.case_sensitive else s.lower()) not in haystack]
    score = 1 - len(missing) / len(config.substrings)
    rationale = "all substrings found in the saved card" if not missing else \
        "missing from the saved card: " + ", ".join(repr(s) for s in missing)
    return GraderResult(grader="card_must_contain", score=score, passed=not missing, rationale=rationale,
                        details={"missing": missing})


@grader("card_tags", config=TagsConfig, version="1", agent="card_agent")
def card_tags(task: Task, trial: Trial, config: TagsConfig) -> GraderResult:
    tags = set(_state(trial).get("card_tags") or [])
    missing = [tag for tag in config.expected_tags if tag not in tags]
    score = 1 - len(missing) / len(config.expected_tags)
    rationale = "all expected tags present" if not missing else "missing tags: " + ", ".join(missing)
    return GraderResult(grader="card_tags", score=score, passed=not missing, rationale=rationale,
                        details={"tags": sorted(tags), "missing": missing})
