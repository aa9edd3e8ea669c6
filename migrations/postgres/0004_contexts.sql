-- Conversation memory per A2A context: the turns so far and the handler's session state.
CREATE TABLE contexts (
    tenant      text COLLATE "C" NOT NULL,
    endpoint_id text COLLATE "C" NOT NULL,
    principal   text COLLATE "C" NOT NULL,
    context_id  text COLLATE "C" NOT NULL,
    turns       jsonb NOT NULL DEFAULT '[]',
    session     jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, endpoint_id, principal, context_id)
);
