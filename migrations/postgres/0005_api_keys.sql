-- Callers' API keys, looked up by their public id on every authenticated request.
-- key_hash is the hex HMAC-SHA-256 of the full key; the key itself is never stored.
-- Revoked and expired keys stay (revoked_at / expires_at), so an operator can see them.
CREATE TABLE api_keys (
    id          text COLLATE "C" PRIMARY KEY,
    endpoint_id text COLLATE "C" NOT NULL,
    tenant      text COLLATE "C" NOT NULL,
    principal   text COLLATE "C" NOT NULL,
    name        text NOT NULL DEFAULT '',
    key_hash    text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz
);

-- Listing an endpoint's keys, oldest first.
CREATE INDEX api_keys_by_endpoint ON api_keys (endpoint_id, created_at, id);
