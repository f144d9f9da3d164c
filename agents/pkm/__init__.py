"""PKM Agent: files one raw note into a PARA Markdown knowledge base."""

from prompt_optimizer_agents.pkm import agent as _agent
from prompt_optimizer_agents.pkm.sim import PROFILE
from prompt_optimizer_agents.pkm.tools import SCHEMAS
from optimizer import agent
from prompt_optimizer_outcomes.pkm import PKMOutcome

run = agent("pkm_agent", prompt_file="agents/prompts/pkm_agent.md", sim_profile=PROFILE, tools=SCHEMAS,
            outcome=PKMOutcome)(_agent.run)
