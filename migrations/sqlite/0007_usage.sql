-- The usage ledger: what a task used, written with its terminal write on its own row, so the
-- ledger costs no write of its own (Store.usage_summary). ended_us is NULL on tasks without
-- a record (not ended yet, or ended before this migration). Times are epoch microseconds.
ALTER TABLE tasks ADD COLUMN usage_key_id TEXT;
ALTER TABLE tasks ADD COLUMN usage_key_name TEXT;
ALTER TABLE tasks ADD COLUMN started_us INTEGER;
ALTER TABLE tasks ADD COLUMN ended_us INTEGER;
ALTER TABLE tasks ADD COLUMN requests INTEGER;
ALTER TABLE tasks ADD COLUMN bytes_in INTEGER;
ALTER TABLE tasks ADD COLUMN bytes_out INTEGER;
ALTER TABLE tasks ADD COLUMN input_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN output_tokens INTEGER;
ALTER TABLE tasks ADD COLUMN cost_micros INTEGER;
ALTER TABLE tasks ADD COLUMN currency TEXT;

-- Summaries by time range, by endpoint or by principal (a quota's check: one principal or one
-- endpoint since a window's start). Partial: only ended tasks with a record are indexed.
CREATE INDEX IF NOT EXISTS tasks_usage_by_end ON tasks (ended_us) WHERE ended_us IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_usage_by_endpoint ON tasks (endpoint_id, ended_us)
    WHERE ended_us IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_usage_by_principal ON tasks (principal, ended_us)
    WHERE ended_us IS NOT NULL;
