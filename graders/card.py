"""Card Agent graders: they read the saved card (the Outcome), never the chat reply."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from optimizer import AnswerKey, GraderConfig, GraderResult, Task, Trial, grader
from prompt_optimizer_outcomes.card import TEMPLATE_IDS, CardOutcome


class TemplateChoiceConfig(GraderConfig):
    expected_template_ids: list[str] = Field(min_length=1)
    """Acceptable templates (a set): any of them as primary earns full credit."""
    min_score: float = Field(default=0.5, ge=0.0, le=1.0)
    """Pass when the score reaches this (0.5: an acceptable template as a secondary config passes)."""

    @field_validator("expected_template_ids")
    @classmethod
    def _known(cls, ids: list[str]) -> list[str]:
        unknown = [name for name in ids if name not in TEMPLATE_IDS]
        if unknown:  # a template no card can have: the grader could never pass
            raise ValueError(f"unknown template id(s) {', '.join(map(repr, unknown))}: the card format's ids are "
                             + ", ".join(TEMPLATE_IDS))
        return ids


class MustContainConfig(GraderConfig):
    substrings: Annotated[list[str], AnswerKey("graded substring", min_length=3)] = Field(min_length=1)
    """Texts the saved card must contain; a prompt may not copy one of 3 or more characters."""
    case_sensitive: bool = False


class TagsConfig(GraderConfig):
    expected_tags: list[str] = Field(min_length=1)


def _state(trial: Trial) -> CardOutcome:
    return trial.outcome.read(CardOutcome)


@grader(version="1", agent="card_agent")
def card_completion(task: Task, trial: Trial, config: BaseModel) -> GraderResult:
    state = _state(trial)
    checks = {
        "save succeeded": state.saved,
        "status completed": state.status == "completed",
        "title present": bool(state.title),
        "at least one ui_config": bool(state.template_ids),
        "fact_id matches input": bool(state.fact_id) and state.fact_id == state.expected_fact_id,
    }
    score = sum(checks.values()) / len(checks)
    failed = [name for name, ok in checks.items() if not ok]
    rationale = "all 5 checks passed" if not failed else f"{len(failed)} of 5 checks not met: " + ", ".join(
        f"'{name}'" for name in failed)
    return GraderResult(score=score, passed=score == 1.0, rationale=rationale,
                        details={"checks": checks})


@grader(config=TemplateChoiceConfig, version="1", agent="card_agent")
def card_template_choice(task: Task, trial: Trial, config: TemplateChoiceConfig) -> GraderResult:
    chosen = _state(trial).template_ids
    acceptable = set(config.expected_template_ids)
    if chosen and chosen[0] in acceptable:
        score, why = 1.0, f"primary template {chosen[0]!r} is acceptable"
    elif acceptable & set(chosen[1:]):
        score, why = 0.5, f"primary {chosen[0]!r} is not acceptable; an acceptable template appears later"
    else:
        score, why = 0.0, f"templates {chosen or 'none'} include none of {sorted(acceptable)}"
    details = {"chosen": chosen, "acceptable": sorted(acceptable)}
    if score < 1.0:  # what the agent took for what: the confusion target selection counts
        details["confusion"] = {"got": chosen[0] if chosen else "no template",
                                "expected": " or ".join(sorted(acceptable))}
    return GraderResult(score=score, passed=score >= config.min_score, rationale=why, details=details)


@grader(config=MustContainConfig, version="1", agent="card_agent")
def card_must_contain(task: Task, trial: Trial, config: MustContainConfig) -> GraderResult:
    raw = _state(trial).raw_yaml
    haystack = raw if config.case_sensitive else raw.lower()
    missing = [s for s in config.substrings if (s if config.case_sensitive else s.lower()) not in haystack]
    score = 1 - len(missing) / len(config.substrings)
    rationale = "all substrings found in the saved card" if not missing else \
        "missing from the saved card: " + ", ".join(repr(s) for s in missing)
    return GraderResult(score=score, passed=not missing, rationale=rationale,
                        details={"missing": missing})


@grader(config=TagsConfig, version="1", agent="card_agent")
def card_tags(task: Task, trial: Trial, config: TagsConfig) -> GraderResult:
    tags = set(_state(trial).card_tags)
    missing = [tag for tag in config.expected_tags if tag not in tags]
    score = 1 - len(missing) / len(config.expected_tags)
    rationale = "all expected tags present" if not missing else "missing tags: " + ", ".join(missing)
    return GraderResult(score=score, passed=not missing, rationale=rationale,
                        details={"tags": sorted(tags), "missing": missing})
