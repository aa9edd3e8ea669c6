-- Endpoints: one row per agent the gateway exposes. The card and the handler
-- metadata are JSON documents read whole, so they are JSONB.
CREATE TABLE endpoints (
    id          text COLLATE "C" PRIMARY KEY,
    tenant      text COLLATE "C" NOT NULL,
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    enabled     boolean NOT NULL DEFAULT true,
    card        jsonb NOT NULL DEFAULT '{}',
    metadata    jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

CREATE INDEX endpoints_by_created ON endpoints (created_at, id);
