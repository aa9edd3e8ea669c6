-- The audit log (governance.audit.record): one row per change an operator made, append-only
-- through the gateway; old rows are pruned after audit_retention_days. before/after/details
-- hold the changed fields with secrets already removed. Pages are newest first: (at, id).
CREATE TABLE audit_log (
    id      text COLLATE "C" PRIMARY KEY,
    at      timestamptz NOT NULL,
    actor   text NOT NULL,
    action  text NOT NULL,
    target  text NOT NULL,
    before  jsonb,
    after   jsonb,
    details jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_by_time ON audit_log (at DESC, id DESC);
