"""LLM judges: a dspy signature run on the judge model at temperature 0, with typed outputs.

A judge is declared once, with `@judge` (below; `optimizer.judge` in the public API), by the
module that grades with it, which the registry's plugin loading imports: its rubric file (the instructions the judge model
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
import threading
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
from optimizer.registry import load_plugins
from optimizer.types import Usage

PASS_THRESHOLD = 0.6
CALIBRATION_BAR = 0.7
"""Spearman correlation with the human labels a judge needs before its verdicts may gate."""


class JudgeError(OptimizerError):
    """The judge model gave no valid answer (after retries)."""


SMALL_MODEL_PREFIXES = ("local/",)
"""Judge models asked in a judge's small-model form (one criterion per call) under `form="auto"`."""
CRITERION_TOKENS = 40


@dataclass(frozen=True)
class Criterion:
    """One question of a judge's small-model form. It fills the judge's output `name`: the model
    answers 0, 1 or 2 (read as 0, 0.5 or 1), shown only the `inputs` it needs, with the wording of
    its own `rubric` file."""

    name: str
    rubric: Path
    inputs: tuple[str, ...]


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
    criteria: tuple[Criterion, ...] = ()
    """The small-model form: the same outputs asked one criterion per call (none: the rubric only)."""

    @property
    def rubric_text(self) -> str:
        return self.rubric.read_text(encoding="utf-8")

    @property
    def rubric_hash(self) -> str:
        """All of the judge's wording (the rubric and each criterion), for fingerprints."""
        return _hash_files([self.rubric, *(criterion.rubric for criterion in self.criteria)])

    def form_for(self, model: str, requested: str = "auto") -> str:
        """`rubric` (one call, the whole rubric) or `criteria` (one call per criterion): as
        requested, or under `auto` the criteria for the small models of `SMALL_MODEL_PREFIXES`."""
        if requested == "criteria" and not self.criteria:
            raise JudgeError(f"judge {self.name} has no criteria to ask one at a time")
        if requested != "auto":
            return requested
        return "criteria" if self.criteria and model.startswith(SMALL_MODEL_PREFIXES) else "rubric"

    def wording_hash(self, form: str) -> str:
        """The hash of the wording a form uses: what a calibration and a cached answer stand for."""
        return _hash_files([self.rubric] if form == "rubric" else [criterion.rubric for criterion in self.criteria])


def _hash_files(paths: list[Path]) -> str:
    """The files' contents hashed in order (one file: the hash of its bytes, as it always was)."""
    digest = hashlib.sha256()
    for number, path in enumerate(paths):
        digest.update(b"\0" if number else b"")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class JudgeSettings:
    model: str
    retry_attempts: int
    """The setting of that name."""
    cache: ResponseCache | None = None
    run_id: str | None = None
    """The run the judged trials belong to (for the cost ledger)."""
    in_process: bool = False
    """Answer a `mock/*` judge model with the judge's offline heuristic directly, without dspy and
    litellm (`suites validate`)."""
    form: str = "auto"
    """`auto`, `rubric` or `criteria` (see `Judge.form_for`)."""


@dataclass
class Verdict:
    outputs: dict[str, Any]
    score: float
    model: str
    rubric_hash: str
    """The hash of the wording asked (`Judge.wording_hash` of `form`)."""
    form: str = "rubric"
    cached: bool = False
    usage: Usage = field(default_factory=Usage)

    def details(self, judge: Judge) -> dict[str, Any]:
        rubric = "criteria" if self.form == "criteria" else judge.rubric.name
        return {"judge_model": self.model, "rubric": rubric, "rubric_hash": self.rubric_hash,
                "judge_outputs": self.outputs, "judge_cached": self.cached,
                "judge_usage": self.usage.model_dump()}


_registry: dict[str, Judge] = {}
"""The judges registered with `judge(...)`, by name."""
_registry_lock = threading.Lock()


def judge(name: str, *, rubric: Path, signature: Callable[[str], type], output_fields: tuple[str, ...],
          check: Callable[[dict[str, Any]], dict[str, Any]], score: Callable[[dict[str, Any]], float],
          calibration: Path | None = None, max_tokens: int = 400, criteria: tuple[Criterion, ...] = ()):
    """Register an LLM judge; decorates its offline answer, `(inputs) -> outputs`, and returns the
    `Judge` (pass it to `@grader(judge=...)` and `ask`). See `Judge` for the arguments; `criteria`
    give it a small-model form."""

    def register(offline: Callable[[dict[str, str]], dict[str, Any]]) -> Judge:
        made = Judge(name=name, rubric=rubric, signature=signature, output_fields=tuple(output_fields),
                     check=check, score=score, offline=offline, calibration=calibration, max_tokens=max_tokens,
                     criteria=tuple(criteria))
        with _registry_lock:
            _registry[name] = made
        return made

    return register


def get_judge(name: str) -> Judge:
    load_plugins()
    if name not in _registry:
        raise JudgeError(f"unknown judge {name!r} (known: {', '.join(sorted(_registry)) or 'none'})")
    return _registry[name]


def judges() -> dict[str, Judge]:
    load_plugins()
    return dict(_registry)
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
    form = judge.form_for(settings.model, settings.form)
    wording = judge.wording_hash(form)
    key = "judge:" + hashlib.sha256(json.dumps(
        {"judge": judge.name, "model": settings.model, "rubric": wording, "inputs": inputs,
         **({} if settings.model.startswith("mock/") else {"packages": mock.reply_packages(("dspy", "litellm"))})},
        sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    if settings.cache is not None:
        hit = settings.cache.get(key)
        if hit is not None:
            return Verdict(hit["outputs"], hit["score"], settings.model, wording, form, cached=True,
                           usage=Usage(cache_hits=1))
    if mock.served_in_process(settings.model, settings.in_process):
        return _verdict(judge, judge.offline(inputs), settings, Usage(), wording, form)
    if form == "criteria":
        answer, usage = {}, Usage()
        for criterion in judge.criteria:
            value, used = _ask_one(judge, f"{judge.name}#{criterion.name}", _criterion_signature(criterion),
                                   {name: inputs.get(name, "") for name in criterion.inputs}, inputs, settings,
                                   CRITERION_TOKENS, criterion.rubric.read_text(encoding="utf-8"))
            usage.add(used)
            answer[criterion.name] = value.score / 2
        answer["rationale"] = "asked one criterion at a time: " + ", ".join(
            f"{criterion.name} {answer[criterion.name]:g}" for criterion in judge.criteria)
    else:
        prediction, usage = _ask_one(judge, judge.name, judge.signature(judge.rubric_text), inputs, inputs, settings,
                                     judge.max_tokens, judge.rubric_text)
        answer = {name: getattr(prediction, name, None) for name in judge.output_fields}
    verdict = _verdict(judge, answer, settings, usage, wording, form)
    if settings.cache is not None:
        settings.cache.put(key, settings.model, {"outputs": verdict.outputs, "score": verdict.score})
    return verdict


def _ask_one(judge: Judge, label: str, signature: type, shown: dict[str, str], inputs: dict[str, str],
             settings: JudgeSettings, max_tokens: int, wording: str) -> tuple[Any, Usage]:
    """One dspy call on the judge model; the mock models answer it by `label` (see `offline_reply`)."""
    from optimizer.models._dspy import dspy_lm, lm_usage

    lm = dspy_lm(settings.model, metadata={JUDGE_KEY: label, JUDGE_INPUTS_KEY: inputs},
                 max_tokens=max_tokens, retry_attempts=settings.retry_attempts)
    import dspy

    with charged("judge", settings.model, estimate_tokens(wording, shown), max_tokens,
                 run_id=settings.run_id) as charge:
        try:
            with dspy.context(lm=lm):
                prediction = dspy.Predict(signature)(**shown)
        except Exception as exc:  # a reply no adapter can parse, or a model fault after retries
            raise JudgeError(f"judge {label} on {settings.model} gave no usable answer: "
                             f"{type(exc).__name__}: {str(exc)[:300]}") from None
        finally:
            charge.usage = lm_usage(lm)
    return prediction, charge.usage


def _criterion_signature(criterion: Criterion) -> type:
    """A dspy signature asking one criterion: its inputs as text, one answer of 0, 1 or 2."""
    from typing import Literal

    import dspy

    fields: dict[str, Any] = {name: (str, dspy.InputField()) for name in criterion.inputs}
    fields["score"] = (Literal[0, 1, 2], dspy.OutputField(desc="0, 1 or 2"))
    return dspy.make_signature(fields, criterion.rubric.read_text(encoding="utf-8"))


def _verdict(judge: Judge, answer: dict[str, Any], settings: JudgeSettings, usage: Usage, wording: str,
             form: str) -> Verdict:
    try:
        outputs = judge.check(answer)
        score = judge.score(outputs)
    except (ValueError, TypeError) as exc:
        raise JudgeError(f"judge {judge.name} on {settings.model} answered out of range: {exc}") from None
    return Verdict(outputs, score, settings.model, wording, form, usage=usage)


def offline_reply(name: str, inputs: dict[str, str]) -> str:
    """The mock models' answer to a judge call, in dspy's field-marker format. `judge#criterion`
    asks one criterion of the small-model form: the offline value of that output, as 0, 1 or 2."""
    judge_name, _, criterion = name.partition("#")
    judge = get_judge(judge_name)
    answer = judge.offline(inputs)
    if criterion:
        return f"[[ ## score ## ]]\n{round(2 * float(answer[criterion]))}\n\n[[ ## completed ## ]]"
    parts = []
    for field_name in judge.output_fields:
        if field_name in answer:
            value = answer[field_name]
            parts.append(f"[[ ## {field_name} ## ]]\n{json.dumps(value) if not isinstance(value, str) else value}")
    return "\n\n".join(parts) + "\n\n[[ ## completed ## ]]"


mock.play("judge", offline_reply)
