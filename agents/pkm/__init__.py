"""PKM Agent: files one raw note into a PARA Markdown knowledge base."""

from . import agent as _agent
from .sim import PROFILE
from .tools import SCHEMAS
from .triage import demonstration, opened
from optimizer import agent
from prompt_optimizer_outcomes.pkm import PKMOutcome

run = agent("pkm_agent", prompt_file="agents/prompts/pkm_agent.md", sim_profile=PROFILE, tools=SCHEMAS,
            outcome=PKMOutcome, demonstrate=demonstration, replay=opened)(_agent.run)
