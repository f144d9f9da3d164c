-- The SQLite DDL of a blank store made by the release that added revision 0001_initial
-- (commit 7dc9024): its schema.
CREATE TABLE schema_migrations (
	name VARCHAR NOT NULL,
	applied_at DATETIME NOT NULL,
	PRIMARY KEY (name)
);
CREATE TABLE schema_version (
	id INTEGER NOT NULL,
	version INTEGER NOT NULL,
	PRIMARY KEY (id)
);
CREATE TABLE runs (
	run_id VARCHAR NOT NULL,
	kind VARCHAR NOT NULL,
	status VARCHAR NOT NULL,
	started_at DATETIME NOT NULL,
	finished_at DATETIME,
	settings_json TEXT NOT NULL,
	fingerprints_json TEXT NOT NULL,
	summary_json TEXT,
	PRIMARY KEY (run_id)
);
CREATE TABLE response_cache (
	"key" VARCHAR NOT NULL,
	model VARCHAR NOT NULL,
	value_json TEXT NOT NULL,
	created_at DATETIME NOT NULL,
	PRIMARY KEY ("key")
);
CREATE TABLE trials (
	id INTEGER NOT NULL,
	run_id VARCHAR NOT NULL,
	suite VARCHAR NOT NULL,
	task_id VARCHAR NOT NULL,
	bucket VARCHAR NOT NULL,
	split VARCHAR NOT NULL,
	trial_index INTEGER NOT NULL,
	status VARCHAR NOT NULL,
	score FLOAT,
	error TEXT,
	duration_s FLOAT NOT NULL,
	prompt_tokens INTEGER NOT NULL,
	completion_tokens INTEGER NOT NULL,
	cost_usd FLOAT NOT NULL,
	model_calls INTEGER NOT NULL,
	cache_hits INTEGER NOT NULL,
	transcript_json TEXT NOT NULL,
	outcome_json TEXT NOT NULL,
	PRIMARY KEY (id),
	UNIQUE (run_id, suite, task_id, trial_index),
	FOREIGN KEY(run_id) REFERENCES runs (run_id)
);
CREATE INDEX ix_trials_run_id ON trials (run_id);
CREATE TABLE grader_results (
	id INTEGER NOT NULL,
	trial_id INTEGER NOT NULL,
	grader VARCHAR NOT NULL,
	score FLOAT,
	passed BOOLEAN NOT NULL,
	errored BOOLEAN NOT NULL,
	rationale TEXT NOT NULL,
	details_json TEXT NOT NULL,
	PRIMARY KEY (id),
	FOREIGN KEY(trial_id) REFERENCES trials (id)
);
CREATE INDEX ix_grader_results_trial_id ON grader_results (trial_id);
