"""The proposer the settings name (`make_proposer`): a module above the proposers, which stand on
`optimizer.proposal.proposers`' types."""

from __future__ import annotations

from optimizer.errors import ConfigError
from optimizer.proposal.box import confinement
from optimizer.proposal.command import CommandProposer
from optimizer.proposal.llm import LLMProposer
from optimizer.proposal.proposers import ExampleProposer, Proposer, asked_format, patch_format
from optimizer.settings.parts import ProposalSettings


def make_proposer(settings: ProposalSettings) -> Proposer:
    """The proposer `settings` name (`Settings.proposal`)."""
    if settings.proposer == "command":
        if not settings.proposer_command:
            raise ConfigError("--proposer command needs a command line", field="proposer_command",
                              fix="set proposer_command in [tool.optimizer] or OPTIMIZER_PROPOSER_COMMAND")
        return CommandProposer(settings.proposer_command, timeout_s=settings.proposer_timeout,
                               confinement=confinement(), env=settings.proposer_env)
    patcher = LLMProposer(settings.patcher_model, script=settings.sim.mock_patcher_script,
                          skill=settings.sim.mock_patcher_skill, seed=settings.seed,
                          sample_temperature=settings.patcher_temperature,
                          retry_attempts=settings.retry_attempts, patch_format=asked_format(settings))
    return ExampleProposer(patcher) if patch_format(settings) == "example" else patcher
