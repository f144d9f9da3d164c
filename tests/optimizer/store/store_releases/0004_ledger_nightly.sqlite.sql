-- The SQLite DDL of a blank store made by the release that added revision 0004_ledger_nightly
-- (commit 4819350): what it made beyond the release before (a table made again replaces that table).
CREATE TABLE ledger (
	id INTEGER NOT NULL,
	at DATETIME NOT NULL,
	role VARCHAR NOT NULL,
	model VARCHAR NOT NULL,
	run_id VARCHAR,
	iteration_id VARCHAR,
	nightly_id VARCHAR,
	calls INTEGER NOT NULL,
	prompt_tokens INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	cost_usd FLOAT NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX ix_ledger_nightly_id ON ledger (nightly_id);
CREATE INDEX ix_ledger_iteration_id ON ledger (iteration_id);
CREATE INDEX ix_ledger_run_id ON ledger (run_id);
CREATE TABLE nightlies (
	nightly_id VARCHAR NOT NULL,
	branch VARCHAR NOT NULL,
	base_ref VARCHAR NOT NULL,
	base_commit VARCHAR NOT NULL,
	tip_commit VARCHAR NOT NULL,
	status VARCHAR NOT NULL,
	started_at DATETIME NOT NULL,
	finished_at DATETIME,
	settings_json TEXT NOT NULL,
	state_json TEXT NOT NULL,
	PRIMARY KEY (nightly_id)
);
