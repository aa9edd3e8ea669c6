-- An endpoint's tasks of every state across tenants and principals, newest status first: the
-- operators' task list (Store.list_endpoint_tasks), keyset paginated on (status_us, id).
CREATE INDEX IF NOT EXISTS tasks_by_endpoint ON tasks (endpoint_id, status_us DESC, id DESC);
