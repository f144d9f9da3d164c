"""LLM judges: a dspy signature run on the judge model at temperature 0, with typed outputs.

A judge is declared once, with `@judge` (`optimizer.registry`, the registry of agents and
graders), by the module that grades with it: its rubric file (the instructions the judge model
reads; versioned by content hash), the dspy signature, how to check and score an answer, a
deterministic offline answer (what `mock/sim` and `mock/oracle` reply, so tests and `suites
validate` need no model) and its human-labelled calibration examples.

`ask` runs a judge on the judge model of the current grading context (the runner sets it), caches
the checked answer in the store by content hash (model, judge, rubric hash, inputs), and raises
`JudgeError` when the model cannot produce a valid answer; the runner records that as an
*errored* grader, never as a fail.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from optimizer.errors import OptimizerError
from optimizer.ledger import charged, estimate_tokens
from optimizer.models import mock
from optimizer.models._context import JUDGE_INPUTS_KEY, JUDGE_KEY
from optimizer.models.client import ResponseCache
from optimizer.registry import _judges, get_judge, judges  # noqa: F401 (read from here by the harness)
from optimizer.turns import waiting
from optimizer.types import Usage

PASS_THRESHOLD = 0.6
CALIBRATION_BAR = 0.7
"""Spearman correlation with the human labels a judge needs before its verdicts may gate."""


class JudgeError(OptimizerError):
    """The judge model gave no valid answer (after retries)."""


@dataclass(frozen=True)
class Judge:
    name: str
    rubric: Path
    signature: Callable[[str], type]
    """Builds the dspy signature class from the rubric text (dspy is imported lazily)."""
    output_fields: tuple[str, ...]
    """The signature's output fields, in the order the model writes them (rationale first)."""
    check: Callable[[dict[str, Any]], dict[str, Any]]
    """Validates and normalises the typed outputs; raises ValueError on an unusable answer."""
    score: Callable[[dict[str, Any]], float]
    offline: Callable[[dict[str, str]], dict[str, Any]]
    """The deterministic answer of the mock models (a documented heuristic, not a real judgment)."""
    calibration: Path | None = None
    """JSON Lines of human-labelled examples: {"id", "inputs", "label", "note"}."""
    max_tokens: int = 400

    @property
    def rubric_text(self) -> str:
        return self.rubric.read_text(encoding="utf-8")

    @property
    def rubric_hash(self) -> str:
        return hashlib.sha256(self.rubric.read_bytes()).hexdigest()[:12]


@dataclass(frozen=True)
class JudgeSettings:
    model: str
    cache: ResponseCache | None = None
    retry_attempts: int = 4
    run_id: str | None = None
    """The run the judged trials belong to (for the cost ledger)."""
    in_process: bool = False
    """Answer a `mock/*` judge model with the judge's offline heuristic directly, without dspy and
    litellm (`suites validate`)."""


@dataclass
class Verdict:
    outputs: dict[str, Any]
    score: float
    model: str
    rubric_hash: str
    cached: bool = False
    usage: Usage = field(default_factory=Usage)

    def details(self, judge: Judge) -> dict[str, Any]:
        return {"judge_model": self.model, "rubric": judge.rubric.name, "rubric_hash": self.rubric_hash,
                "judge_outputs": self.outputs, "judge_cached": self.cached,
                "judge_usage": self.usage.model_dump()}


_registry = _judges
"""The judges registered with `@judge`: the registry's own table, under its name here."""
_current: ContextVar[JudgeSettings | None] = ContextVar("optimizer_judge_settings", default=None)


@contextmanager
def judging(settings: JudgeSettings) -> Iterator[None]:
    """Run graders inside this block with `settings` as their judge model."""
    token = _current.set(settings)
    try:
        yield
    finally:
        _current.reset(token)


def current_settings() -> JudgeSettings:
    settings = _current.get()
    if settings is None:
        raise JudgeError("no judge model is configured for this grading run")
    return settings


def ask(judge: Judge, inputs: dict[str, str], settings: JudgeSettings | None = None) -> Verdict:
    settings = settings or current_settings()
    key = "judge:" + hashlib.sha256(json.dumps(
        {"judge": judge.name, "model": settings.model, "rubric": judge.rubric_hash, "inputs": inputs,
         **({} if settings.model.startswith("mock/") else {"packages": mock.reply_packages(("dspy", "litellm"))})},
        sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    if settings.cache is not None:
        hit = settings.cache.get(key)
        if hit is not None:
            return Verdict(hit["outputs"], hit["score"], settings.model, judge.rubric_hash, cached=True,
                           usage=Usage(cache_hits=1))
    if mock.served_in_process(settings.model, settings.in_process):
        return _verdict(judge, judge.offline(inputs), settings, Usage())
    from optimizer.models._dspy import dspy_lm, lm_usage

    lm = dspy_lm(settings.model, metadata={JUDGE_KEY: judge.name, JUDGE_INPUTS_KEY: inputs},
                 max_tokens=judge.max_tokens, retry_attempts=settings.retry_attempts)
    import dspy

    predictor = dspy.Predict(judge.signature(judge.rubric_text))
    with charged("judge", settings.model, estimate_tokens(judge.rubric_text, inputs), judge.max_tokens,
                 run_id=settings.run_id) as charge:
        try:
            with dspy.context(lm=lm), waiting():
                prediction = predictor(**inputs)
        except Exception as exc:  # a reply no adapter can parse, or a model fault after retries
            raise JudgeError(f"judge {judge.name} on {settings.model} gave no usable answer: "
                             f"{type(exc).__name__}: {str(exc)[:300]}") from None
        finally:
            charge.usage = lm_usage(lm)
    verdict = _verdict(judge, {name: getattr(prediction, name, None) for name in judge.output_fields},
                       settings, charge.usage)
    if settings.cache is not None:
        settings.cache.put(key, settings.model, {"outputs": verdict.outputs, "score": verdict.score})
    return verdict


def _verdict(judge: Judge, answer: dict[str, Any], settings: JudgeSettings, usage: Usage) -> Verdict:
    try:
        outputs = judge.check(answer)
        score = judge.score(outputs)
    except (ValueError, TypeError) as exc:
        raise JudgeError(f"judge {judge.name} on {settings.model} answered out of range: {exc}") from None
    return Verdict(outputs, score, settings.model, judge.rubric_hash, usage=usage)


def offline_reply(name: str, inputs: dict[str, str]) -> str:
    """The mock models' answer to a judge call, in dspy's field-marker format."""
    judge = get_judge(name)
    answer = judge.offline(inputs)
    parts = []
    for field_name in judge.output_fields:
        if field_name in answer:
            value = answer[field_name]
            parts.append(f"[[ ## {field_name} ## ]]\n{json.dumps(value) if not isinstance(value, str) else value}")
    return "\n\n".join(parts) + "\n\n[[ ## completed ## ]]"


mock.play("judge", offline_reply)
