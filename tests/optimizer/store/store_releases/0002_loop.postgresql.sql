-- The PostgreSQL DDL of a blank store made by the release that added revision 0002_loop
-- (commit f38be09): what it made beyond the release before (a table made again replaces that table).
CREATE TABLE iterations (
	iteration_id VARCHAR NOT NULL,
	kind VARCHAR NOT NULL,
	status VARCHAR NOT NULL,
	started_at TIMESTAMP WITH TIME ZONE NOT NULL,
	finished_at TIMESTAMP WITH TIME ZONE,
	agent VARCHAR,
	base_ref VARCHAR,
	base_commit VARCHAR NOT NULL,
	baseline_run_id VARCHAR,
	targets_json TEXT NOT NULL,
	request_path TEXT,
	manual_sha256 VARCHAR,
	settings_json TEXT NOT NULL,
	summary_json TEXT,
	PRIMARY KEY (iteration_id)
);
CREATE TABLE proposals (
	id SERIAL NOT NULL,
	iteration_id VARCHAR NOT NULL,
	ordinal INTEGER NOT NULL,
	agent VARCHAR NOT NULL,
	branch VARCHAR NOT NULL,
	proposer VARCHAR NOT NULL,
	patcher_model VARCHAR,
	manual_sha256 VARCHAR,
	status VARCHAR NOT NULL,
	reason TEXT NOT NULL,
	rationale TEXT NOT NULL,
	diff TEXT NOT NULL,
	commit_sha VARCHAR,
	candidate_run_id VARCHAR,
	decision_json TEXT,
	usage_json TEXT NOT NULL,
	rollouts INTEGER NOT NULL,
	created_at TIMESTAMP WITH TIME ZONE NOT NULL,
	PRIMARY KEY (id),
	UNIQUE (iteration_id, ordinal),
	FOREIGN KEY(iteration_id) REFERENCES iterations (iteration_id)
);
CREATE INDEX ix_proposals_iteration_id ON proposals (iteration_id);
