-- The push delivery outbox: one row per notification and webhook until it is delivered or
-- given up. due_at (epoch seconds) is when a replica may claim it next: its next retry, or the
-- end of the claim of the replica sending it (owner).
CREATE TABLE IF NOT EXISTS push_deliveries (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    principal   TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    config_id   TEXT NOT NULL,
    body        BLOB NOT NULL,
    due_at      REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    owner       TEXT
);
CREATE INDEX IF NOT EXISTS push_deliveries_by_due ON push_deliveries (due_at);
