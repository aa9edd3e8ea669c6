-- Endpoints, tasks, push configs and conversation contexts for the embedded store.
-- Every task, config and context row is keyed by tenant, endpoint and caller principal.
CREATE TABLE IF NOT EXISTS endpoints (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    enabled     INTEGER NOT NULL DEFAULT 1,
    card        TEXT NOT NULL DEFAULT '{}',
    metadata    TEXT NOT NULL DEFAULT '{}',
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS tasks (
    tenant      TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    principal   TEXT NOT NULL,
    id          TEXT NOT NULL,
    context_id  TEXT NOT NULL,
    state       INTEGER NOT NULL,
    status_us   INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    task        BLOB NOT NULL,
    run_ref     TEXT,
    run_state   TEXT NOT NULL DEFAULT '{}',
    owner       TEXT,
    lease_until REAL,
    PRIMARY KEY (tenant, endpoint_id, principal, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_by_id ON tasks (id);
CREATE INDEX IF NOT EXISTS tasks_by_status_time
    ON tasks (tenant, endpoint_id, principal, status_us DESC, id DESC);
CREATE INDEX IF NOT EXISTS tasks_by_context
    ON tasks (tenant, endpoint_id, principal, context_id, status_us DESC, id DESC);
CREATE INDEX IF NOT EXISTS tasks_by_lease ON tasks (lease_until) WHERE owner IS NOT NULL;

CREATE TABLE IF NOT EXISTS push_configs (
    tenant      TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    principal   TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    id          TEXT NOT NULL,
    config      BLOB NOT NULL,
    PRIMARY KEY (tenant, endpoint_id, principal, task_id, id)
);

CREATE TABLE IF NOT EXISTS contexts (
    tenant      TEXT NOT NULL,
    endpoint_id TEXT NOT NULL,
    principal   TEXT NOT NULL,
    context_id  TEXT NOT NULL,
    turns       TEXT NOT NULL DEFAULT '[]',
    session     TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, endpoint_id, principal, context_id)
);
