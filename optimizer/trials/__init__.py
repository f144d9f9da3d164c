"""Trials: the runner, the agent's tool loop, the evaluation of a suite, the judges and their
calibration, and the simulator of the agents."""
