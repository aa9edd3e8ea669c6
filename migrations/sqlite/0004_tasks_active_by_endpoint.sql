-- An endpoint's non-terminal tasks across tenants and principals, newest status first: the
-- snapshot an operator's event feed starts from (Store.list_active_tasks). Partial: terminal
-- tasks are not indexed. The predicate is the query's own (stores.base.NOT_TERMINAL_SQL).
CREATE INDEX IF NOT EXISTS tasks_active_by_endpoint
    ON tasks (endpoint_id, status_us DESC, id DESC) WHERE state NOT IN (3,4,5,7);
