-- An endpoint's tasks of every state across tenants and principals, newest status first: the
-- operators' task list (Store.list_endpoint_tasks), keyset paginated on (status_us, id).
-- Built without blocking writes: the table may be large by now.
-- no-transaction
CREATE INDEX CONCURRENTLY tasks_by_endpoint ON tasks (endpoint_id, status_us, id);
