-- The audit log (governance.audit.record): one row per change an operator made, append-only
-- through the gateway; old rows are pruned after audit_retention_days. at_us is epoch
-- microseconds; before/after/details are JSON text with secrets already removed.
CREATE TABLE IF NOT EXISTS audit_log (
    id      TEXT PRIMARY KEY,
    at_us   INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    before  TEXT,
    after   TEXT,
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_log_by_time ON audit_log (at_us DESC, id DESC);
