"""The loop: one iteration (`iteration`) from baseline to decision, its staging, records and
report, a hand edit through the same gate, and the noise measurement."""
