"""Reporting: a run's report, an iteration's review (console, Markdown, HTML), the decision's
table, trends and history."""
