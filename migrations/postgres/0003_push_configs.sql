-- Push notification configs of a task: the proto's JSON form, keyed by the task's scope.
CREATE TABLE push_configs (
    tenant      text COLLATE "C" NOT NULL,
    endpoint_id text COLLATE "C" NOT NULL,
    principal   text COLLATE "C" NOT NULL,
    task_id     text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    config      jsonb NOT NULL,
    PRIMARY KEY (tenant, endpoint_id, principal, task_id, id)
);
