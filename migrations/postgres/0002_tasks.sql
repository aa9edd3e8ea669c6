-- Tasks, keyed by tenant, endpoint and caller principal; every read filters on all three.
--
-- The task itself is the serialized protobuf (bytea): the proto's JSON form costs
-- about 50 us to encode and 260 us to decode per task in Python against about 1 us
-- for the binary form, and ListTasks decodes a page of them. The columns beside it
-- exist for filtering, ordering, conditional updates and ownership:
--   status_us    the status timestamp in epoch microseconds (ListTasks order and keyset)
--   version      bumped by every write; updates are conditional on it
--   owner        the replica running the task while it is not terminal
--   lease_until  epoch seconds after which another replica may claim the task
-- Identifiers use the "C" collation: byte order, the same in every database, and
-- the order the other stores use for ties.
CREATE TABLE tasks (
    tenant      text COLLATE "C" NOT NULL,
    endpoint_id text COLLATE "C" NOT NULL,
    principal   text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    context_id  text COLLATE "C" NOT NULL,
    state       smallint NOT NULL,
    status_us   bigint NOT NULL,
    version     bigint NOT NULL,
    task        bytea NOT NULL,
    run_ref     text,
    run_state   jsonb NOT NULL DEFAULT '{}',
    owner       text,
    lease_until double precision,
    PRIMARY KEY (tenant, endpoint_id, principal, id)
);

-- Task ids are unique across scopes (lease renewal addresses tasks by id alone).
CREATE UNIQUE INDEX tasks_by_id ON tasks (id);

-- ListTasks: newest status first, keyset on (status_us, id), optionally by context or state.
CREATE INDEX tasks_by_status_time
    ON tasks (tenant, endpoint_id, principal, status_us, id);
CREATE INDEX tasks_by_context
    ON tasks (tenant, endpoint_id, principal, context_id, status_us, id);
CREATE INDEX tasks_by_state
    ON tasks (tenant, endpoint_id, principal, state, status_us, id);

-- Lease expiry: only tasks with an owner (terminal tasks have none) are indexed.
CREATE INDEX tasks_by_lease ON tasks (lease_until) WHERE owner IS NOT NULL;
