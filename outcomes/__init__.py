"""The typed outcomes of the built-in agents: what each agent's run leaves behind, as its graders
read it.

An agent declares its outcome (`@agent(..., outcome=CardOutcome)`) and builds it at the end of a
run; its graders read it (`trial.outcome.read(CardOutcome)`). This package is the one thing the
two sides share: `agents/` and `graders/` import nothing from each other, as a team's agent and
grader packages need not either.
"""
