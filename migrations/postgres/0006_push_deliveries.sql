-- The push delivery outbox: one row per notification and webhook until it is delivered or
-- given up. due_at (epoch seconds) is when a replica may claim it next: its next retry, or the
-- end of the claim of the replica sending it (owner).
CREATE TABLE push_deliveries (
    id          text COLLATE "C" PRIMARY KEY,
    tenant      text COLLATE "C" NOT NULL,
    endpoint_id text COLLATE "C" NOT NULL,
    principal   text COLLATE "C" NOT NULL,
    task_id     text COLLATE "C" NOT NULL,
    config_id   text COLLATE "C" NOT NULL,
    body        bytea NOT NULL,
    due_at      double precision NOT NULL,
    attempts    integer NOT NULL DEFAULT 0,
    owner       text COLLATE "C"
);

-- Claims: the deliveries due before now, earliest first.
CREATE INDEX push_deliveries_by_due ON push_deliveries (due_at);
