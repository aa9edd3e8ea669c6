-- The usage ledger: what a task used, written with its terminal write on its own row, so the
-- ledger costs no write of its own (Store.usage_summary). ended_us is NULL on tasks without
-- a record (not ended yet, or ended before this migration). Times are epoch microseconds.
-- Adding nullable columns without a default rewrites nothing.
ALTER TABLE tasks
    ADD COLUMN usage_key_id   text COLLATE "C",
    ADD COLUMN usage_key_name text,
    ADD COLUMN started_us     bigint,
    ADD COLUMN ended_us       bigint,
    ADD COLUMN requests       integer,
    ADD COLUMN bytes_in       bigint,
    ADD COLUMN bytes_out      bigint,
    ADD COLUMN input_tokens   bigint,
    ADD COLUMN output_tokens  bigint,
    ADD COLUMN cost_micros    bigint,
    ADD COLUMN currency       text COLLATE "C";

-- Summaries by time range, by endpoint or by principal (a quota's check: one principal or one
-- endpoint since a window's start). Partial (only tasks with a record, so built at once: no
-- existing row has one) and covering, so a summary reads the index alone.
CREATE INDEX tasks_usage_by_end ON tasks (ended_us)
    INCLUDE (endpoint_id, principal, state, currency, started_us, requests, bytes_in, bytes_out,
             input_tokens, output_tokens, cost_micros)
    WHERE ended_us IS NOT NULL;
CREATE INDEX tasks_usage_by_endpoint ON tasks (endpoint_id, ended_us)
    INCLUDE (principal, state, currency, started_us, requests, bytes_in, bytes_out,
             input_tokens, output_tokens, cost_micros)
    WHERE ended_us IS NOT NULL;
CREATE INDEX tasks_usage_by_principal ON tasks (principal, ended_us)
    INCLUDE (endpoint_id, state, currency, started_us, requests, bytes_in, bytes_out,
             input_tokens, output_tokens, cost_micros)
    WHERE ended_us IS NOT NULL;
