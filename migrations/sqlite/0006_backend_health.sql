-- Each endpoint's backend health, as every replica's task runs told it (Store.record_backend_health):
-- counts, and the last success and the last error (epoch seconds) with the error's safe message.
CREATE TABLE IF NOT EXISTS backend_health (
    endpoint_id        TEXT PRIMARY KEY,
    successes          INTEGER NOT NULL DEFAULT 0,
    errors             INTEGER NOT NULL DEFAULT 0,
    last_success       REAL,
    last_error         REAL,
    last_error_message TEXT NOT NULL DEFAULT ''
);
