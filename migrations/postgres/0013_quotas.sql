-- Quotas (governance.quotas). A key's limits, as set by an operator ({"tasks_per_minute": 10}).
ALTER TABLE api_keys ADD COLUMN limits jsonb NOT NULL DEFAULT '{}';

-- One counter per (subject, limit, window start), e.g. 'key:ab12|tasks_per_minute|1765000000':
-- added to only while below the limit (one conditional upsert), pruned once its window ended.
CREATE TABLE quota_counters (
    counter    text COLLATE "C" PRIMARY KEY,
    count      bigint NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX quota_counters_by_expiry ON quota_counters (expires_at);

-- Concurrency slots: one row per running task of a subject ('key:ab12', 'endpoint:…'), with a
-- lease its replica renews; a slot whose lease ran out (its replica stopped) no longer counts.
CREATE TABLE quota_slots (
    subject     text COLLATE "C" NOT NULL,
    slot_id     text COLLATE "C" NOT NULL,
    lease_until double precision NOT NULL,
    PRIMARY KEY (subject, slot_id)
);
