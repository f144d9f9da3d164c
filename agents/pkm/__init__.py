"""PKM Agent: files one raw note into a PARA Markdown knowledge base."""

from agents.pkm import agent as _agent
from agents.pkm.sim import PROFILE
from agents.pkm.tools import SCHEMAS
from optimizer import agent
from outcomes.pkm import PKMOutcome

run = agent("pkm_agent", prompt_file="agents/prompts/pkm_agent.md", sim_profile=PROFILE, tools=SCHEMAS,
            outcome=PKMOutcome)(_agent.run)
