"""Code graders and LLM judges, registered with `optimizer.grader`."""
