-- The SQLite DDL of a blank store made by the release that added revision 0005_run_owners
-- (commit f9d2372): what it made beyond the release before (a table made again replaces that table).
CREATE TABLE runs (
	run_id VARCHAR NOT NULL,
	kind VARCHAR NOT NULL,
	status VARCHAR NOT NULL,
	started_at DATETIME NOT NULL,
	finished_at DATETIME,
	settings_json TEXT NOT NULL,
	fingerprints_json TEXT NOT NULL,
	summary_json TEXT,
	owner_host VARCHAR,
	owner_pid INTEGER,
	owner_start VARCHAR,
	heartbeat_at DATETIME,
	PRIMARY KEY (run_id)
);
CREATE TABLE iterations (
	iteration_id VARCHAR NOT NULL,
	kind VARCHAR NOT NULL,
	status VARCHAR NOT NULL,
	started_at DATETIME NOT NULL,
	finished_at DATETIME,
	agent VARCHAR,
	base_ref VARCHAR,
	base_commit VARCHAR NOT NULL,
	baseline_run_id VARCHAR,
	targets_json TEXT NOT NULL,
	request_path TEXT,
	manual_sha256 VARCHAR,
	settings_json TEXT NOT NULL,
	summary_json TEXT,
	owner_host VARCHAR,
	owner_pid INTEGER,
	owner_start VARCHAR,
	heartbeat_at DATETIME,
	PRIMARY KEY (iteration_id)
);
