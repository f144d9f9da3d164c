"""Card Agent: turns one raw note into a timeline card file."""

from agents.card import agent as _agent
from agents.card.sim import PROFILE
from agents.card.tool import SCHEMA
from optimizer import agent
from outcomes.card import CardOutcome

run = agent("card_agent", prompt_file="agents/prompts/card_agent.md", sim_profile=PROFILE,
            tools=[SCHEMA["function"]["name"]], outcome=CardOutcome)(_agent.run)
