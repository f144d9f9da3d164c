"""The comparison's parts, stepped by `optimizer.comparison.compare.compare`: where the next pairs of a task
come from (`plan`) and the three phases that choose them (`phases`)."""
