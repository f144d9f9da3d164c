"""Closed-loop prompt optimizer.

The public API that agents and graders are written against: the data types, the model client,
the `@agent` / `@grader` decorators and the simulated-agent rules. Everything else in the
package is the harness.
"""

from optimizer.agent import AgentContext, AgentRun
from optimizer.errors import InputError, ModelCallError, OptimizerError, TrialTimeout
from optimizer.models import Completion, ModelClient, ToolCallRequest
from optimizer.registry import agent, grader
from optimizer.sim import Rule, SimProfile
from optimizer.types import (GraderResult, GraderSpec, Outcome, RunResult, Suite, SuiteSpec, Task, TaskInput,
                             ToolCall, ToolCallSpec, Transcript, Trial, Usage)

__all__ = [
    "AgentContext", "AgentRun", "Completion", "GraderResult", "GraderSpec", "InputError", "ModelCallError",
    "ModelClient", "OptimizerError", "Outcome", "Rule", "RunResult", "SimProfile", "Suite", "SuiteSpec", "Task",
    "TaskInput", "ToolCall", "ToolCallRequest", "ToolCallSpec", "Transcript", "Trial", "TrialTimeout", "Usage",
    "agent", "grader",
]
