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
CREATE INDEX tasks_usage_by_key ON tasks (usage_key_id, ended_us)
    INCLUDE (endpoint_id, principal, state, currency, started_us, requests, bytes_in,
             bytes_out, input_tokens, output_tokens, cost_micros)
    WHERE ended_us IS NOT NULL;

-- Daily sums of the ledger, kept by a trigger in the transaction of each task's terminal
-- write: summaries over whole UTC days read these instead of every task (a fleet's month is a
-- few thousand rows here, hundreds of thousands in tasks); the partial days at a range's ends
-- read tasks. One row per day, scope, API key and currency, tasks counted per outcome.
CREATE TABLE usage_daily (
    day           integer NOT NULL,  -- days since 1970-01-01 (UTC) of the tasks' end
    endpoint_id   text COLLATE "C" NOT NULL,
    principal     text COLLATE "C" NOT NULL,
    tenant        text COLLATE "C" NOT NULL,
    key_id        text COLLATE "C" NOT NULL,  -- '' for callers without an API key
    currency      text COLLATE "C" NOT NULL,
    completed     bigint NOT NULL,
    failed        bigint NOT NULL,
    canceled      bigint NOT NULL,
    rejected      bigint NOT NULL,
    duration_us   bigint NOT NULL,
    requests      bigint NOT NULL,
    bytes_in      bigint NOT NULL,
    bytes_out     bigint NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_micros   bigint NOT NULL,
    PRIMARY KEY (day, endpoint_id, principal, tenant, key_id, currency)
);
CREATE INDEX usage_daily_by_endpoint ON usage_daily (endpoint_id, day);
CREATE INDEX usage_daily_by_principal ON usage_daily (principal, day);
CREATE INDEX usage_daily_by_key ON usage_daily (key_id, day);

-- task states: 3 completed, 4 failed, 5 canceled, 7 rejected (a2a.proto's TaskState)
CREATE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_daily AS d VALUES (
        NEW.ended_us / 86400000000, NEW.endpoint_id, NEW.principal, NEW.tenant,
        COALESCE(NEW.usage_key_id, ''), COALESCE(NEW.currency, ''), (NEW.state = 3)::int, (NEW.state = 4)::int,
        (NEW.state = 5)::int, (NEW.state = 7)::int, NEW.ended_us - NEW.started_us,
        NEW.requests, NEW.bytes_in, NEW.bytes_out, NEW.input_tokens, NEW.output_tokens,
        NEW.cost_micros)
    ON CONFLICT (day, endpoint_id, principal, tenant, key_id, currency) DO UPDATE SET
        completed = d.completed + EXCLUDED.completed, failed = d.failed + EXCLUDED.failed,
        canceled = d.canceled + EXCLUDED.canceled, rejected = d.rejected + EXCLUDED.rejected,
        duration_us = d.duration_us + EXCLUDED.duration_us,
        requests = d.requests + EXCLUDED.requests, bytes_in = d.bytes_in + EXCLUDED.bytes_in,
        bytes_out = d.bytes_out + EXCLUDED.bytes_out,
        input_tokens = d.input_tokens + EXCLUDED.input_tokens,
        output_tokens = d.output_tokens + EXCLUDED.output_tokens,
        cost_micros = d.cost_micros + EXCLUDED.cost_micros;
    RETURN NULL;
END
$$;

-- A task gets its record once: created ended, or at the update that ends it (an ended task is
-- never updated again).
CREATE TRIGGER tasks_usage_created AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.ended_us IS NOT NULL) EXECUTE FUNCTION usage_daily_add();
CREATE TRIGGER tasks_usage_ended AFTER UPDATE OF ended_us ON tasks
    FOR EACH ROW WHEN (OLD.ended_us IS NULL AND NEW.ended_us IS NOT NULL)
    EXECUTE FUNCTION usage_daily_add();
