"""The echo agent and its grader: the smallest plugin that uses the whole contract."""
