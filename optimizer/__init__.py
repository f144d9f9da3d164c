"""Closed-loop prompt optimizer.

The public API, the whole plugin contract: what an agent, a grader or an LLM judge is written
against, the built-in ones included (docs/plugins.md). The data types; the model client; the
`@agent`, `@grader` and `@judge` decorators, the grader config base and the `AnswerKey` mark; the
typed outcome's base `OutcomeModel`; the tool-calling loop (`ToolLoop`, `Tool`, `ToolOutput`,
`LoopLimits`); asking a judge (`ask`); a model provider (`register_provider`, `Provider`, and
`ProviderSettings`, the part of the settings its `configure` hook is handed, with `ModelSettings`); and
the simulated-agent rules. Everything else in the package is the harness, scheduling included:
trials run on plain threads, and an agent or grader blocks as it likes.

The names are imported on first use (PEP 562), so `optimizer --help` and the commands that call
no model do not pay for building every data model at start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "optimizer.trials.agent_run": ("AgentContext", "AgentRun"),
    "optimizer.errors": ("DeadlinePassed", "InputError", "ModelCallError", "OptimizerError", "TrialCutShort",
                         "TrialTimeout"),
    "optimizer.trials.judging": ("Criterion", "Judge", "JudgeError", "PASS_THRESHOLD", "Verdict", "ask", "judge"),
    "optimizer.models": ("Completion", "ModelClient", "ToolCallRequest"),
    "optimizer.models.providers": ("Provider", "register_provider"),
    "optimizer.registry": ("AnswerKey", "GraderConfig", "agent", "grader"),
    "optimizer.settings.parts": ("ModelSettings", "ProviderSettings"),
    "optimizer.trials.sim": ("Rule", "RuleTexts", "SimProfile", "load_rule_texts"),
    "optimizer.trials.tool_loop": ("AgentLimitError", "LoopLimits", "Tool", "ToolLoop", "ToolOutput", "tool_error"),
    "optimizer.types": ("GraderResult", "GraderSpec", "Outcome", "OutcomeModel", "RunResult", "Suite", "SuiteSpec",
                        "Task", "TaskInput", "ToolCall", "ToolCallSpec", "Transcript", "Trial", "Usage"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'optimizer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

