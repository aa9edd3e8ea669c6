-- Each endpoint's backend health, as every replica's task runs told it (Store.record_backend_health):
-- counts, and the last success and the last error with the error's safe message. Each replica
-- adds its changes at most once per backend_health_write_seconds per endpoint.
CREATE TABLE backend_health (
    endpoint_id        text COLLATE "C" PRIMARY KEY,
    successes          bigint NOT NULL DEFAULT 0,
    errors             bigint NOT NULL DEFAULT 0,
    last_success       timestamptz,
    last_error         timestamptz,
    last_error_message text NOT NULL DEFAULT ''
);
