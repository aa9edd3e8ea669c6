-- Callers' API keys: the HMAC of each key, never the key. Times are UTC ISO 8601 with
-- microseconds (fixed width, so text order is time order).
CREATE TABLE IF NOT EXISTS api_keys (
    id          TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    principal   TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    key_hash    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    expires_at  TEXT,
    revoked_at  TEXT
);
CREATE INDEX IF NOT EXISTS api_keys_by_endpoint ON api_keys (endpoint_id, created_at, id);
