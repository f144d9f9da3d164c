"""Card Agent: turns one raw note into a timeline card file."""

from . import agent as _agent
from .sim import PROFILE
from .tool import SCHEMA
from optimizer import agent
from prompt_optimizer_outcomes.card import CardOutcome

run = agent("card_agent", prompt_file="agents/prompts/card_agent.md", sim_profile=PROFILE,
            tools=[SCHEMA["function"]["name"]], outcome=CardOutcome)(_agent.run)
