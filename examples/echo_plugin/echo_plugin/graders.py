"""The echo agent's grader: it reads the agent's outcome, never the chat."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from echo_plugin.outcome import EchoOutcome
from optimizer import AnswerKey, GraderConfig, GraderResult, Task, Trial, grader


class SaysConfig(GraderConfig):
    words: Annotated[list[str], AnswerKey("expected reply word", min_length=3)] = Field(min_length=1)
    """Words the saved reply must contain (case-insensitive); a prompt may not copy them."""


@grader(config=SaysConfig, agent="echo_agent")
def echo_says(task: Task, trial: Trial, config: SaysConfig) -> GraderResult:
    reply = (trial.outcome.read(EchoOutcome).reply or "").lower()
    missing = [word for word in config.words if word.lower() not in reply]
    score = 1 - len(missing) / len(config.words)
    return GraderResult(score=score, passed=not missing,
                        rationale="every word is in the reply" if not missing else f"missing: {', '.join(missing)}")
