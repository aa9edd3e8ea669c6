-- Every change of an endpoint row, whoever makes it (admin API, console, CLI, plain SQL), is
-- announced on the channel a2a_endpoint_changed with the endpoint id as payload, once the
-- change commits: each replica's live listener drops its cached copy of that endpoint, so a
-- disabled endpoint stops being served everywhere at once instead of within
-- endpoint_cache_seconds.
CREATE FUNCTION a2a_endpoint_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('a2a_endpoint_changed', COALESCE(NEW.id, OLD.id));
    RETURN NULL;
END
$$;

CREATE TRIGGER endpoints_changed AFTER INSERT OR UPDATE OR DELETE ON endpoints
    FOR EACH ROW EXECUTE FUNCTION a2a_endpoint_changed();
