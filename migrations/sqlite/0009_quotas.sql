-- Quotas (governance.quotas). A key's limits, as set by an operator ({"tasks_per_minute": 10}).
ALTER TABLE api_keys ADD COLUMN limits TEXT NOT NULL DEFAULT '{}';

-- One counter per (subject, limit, window start): added to only while below the limit,
-- pruned once its window ended.
CREATE TABLE IF NOT EXISTS quota_counters (
    counter    TEXT PRIMARY KEY,
    count      INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS quota_counters_by_expiry ON quota_counters (expires_at);

-- Concurrency slots: one row per running task of a subject, with a lease its replica renews.
CREATE TABLE IF NOT EXISTS quota_slots (
    subject     TEXT NOT NULL,
    slot_id     TEXT NOT NULL,
    lease_until REAL NOT NULL,
    PRIMARY KEY (subject, slot_id)
);
