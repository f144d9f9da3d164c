"""The task-file format as a markdown table, generated from the pydantic models that load it
(`optimizer.types.Task` and the models of its fields): docs/plugins.md carries the table and a
test checks it equals what this prints, so the reference cannot drift from the loader.

    .venv/bin/python -m optimizer.task_format
"""

from __future__ import annotations

import ast
import inspect
import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from optimizer.types import GraderSpec, ReferenceSolution, Task, TaskInput, ToolCallSpec

NESTED: dict[str, type[BaseModel]] = {"input": TaskInput, "reference_solution": ReferenceSolution,
                                      "reference_solution.tool_calls[]": ToolCallSpec, "graders[]": GraderSpec}
"""The fields whose value is itself a model, listed after the top level under their path."""

REQUIRED_AT_LOAD = {"input": "required", "input.content": "required", "metadata.failure_bucket": "required"}
"""Fields the model leaves optional but suite loading requires (`optimizer.suites`)."""


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """The docstring written under each field of `model`, joined to one line."""
    body = ast.parse(inspect.getsource(model)).body[0].body
    docs = {}
    for field, doc in zip(body, body[1:]):
        if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
            docs[field.target.id] = " ".join(str(doc.value.value).split())
    return docs


def _type(annotation) -> str:
    text = str(annotation) if typing.get_origin(annotation) else getattr(annotation, "__name__", str(annotation))
    return text.replace("typing.", "").replace("optimizer.types.", "").replace("datetime.datetime", "datetime").replace("|", "\\|")


def _limits(info) -> str:
    """The field's bounds (`Field(ge=..., min_length=...)`), as the loader enforces them."""
    words = []
    for bound in info.metadata:
        if getattr(bound, "ge", None) is not None:
            words.append(f"at least {bound.ge}")
        elif getattr(bound, "le", None) is not None:
            words.append(f"at most {bound.le:,}")
        elif getattr(bound, "min_length", None) is not None:
            words.append("non-empty" if bound.min_length == 1 else f"length at least {bound.min_length}")
    return f" ({', '.join(words)})" if words else ""


def _default(info) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return f"`{info.default_factory()!r}`"
    return f"`{info.default!r}`" if info.default is not PydanticUndefined else ""


def rows(prefix: str, model: type[BaseModel]) -> list[str]:
    docs = field_docs(model)
    lines = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        default = REQUIRED_AT_LOAD.get(path, _default(info))
        lines.append(f"| `{path}` | `{_type(info.annotation)}`{_limits(info)} | {default} | {docs.get(name, '')} |")
    return lines


def table() -> str:
    lines = ["| Field | Type | Default | Meaning |", "|---|---|---|---|", *rows("", Task)]
    lines.append(f"| `metadata.failure_bucket` | `str` | {REQUIRED_AT_LOAD['metadata.failure_bucket']} | "
                 "The failure bucket the task belongs to; the loop targets, gates and reports by bucket. "
                 "A plain name (no `/`): graduation makes a folder of it. |")
    lines.append("| `metadata.split` | `str` | `'train'` | `train` or `holdout`. |")
    for path, model in NESTED.items():
        lines += rows(f"{path}.", model)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
