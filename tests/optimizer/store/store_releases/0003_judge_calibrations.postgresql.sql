-- The PostgreSQL DDL of a blank store made by the release that added revision 0003_judge_calibrations
-- (commit 4106925): what it made beyond the release before (a table made again replaces that table).
CREATE TABLE judge_calibrations (
	id SERIAL NOT NULL,
	judge VARCHAR NOT NULL,
	model VARCHAR NOT NULL,
	rubric_hash VARCHAR NOT NULL,
	examples INTEGER NOT NULL,
	errored INTEGER NOT NULL,
	spearman FLOAT,
	agreement FLOAT,
	created_at TIMESTAMP WITH TIME ZONE NOT NULL,
	rows_json TEXT NOT NULL,
	PRIMARY KEY (id)
);
CREATE INDEX ix_judge_calibrations_judge ON judge_calibrations (judge);
