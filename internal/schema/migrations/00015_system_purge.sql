-- +goose Up
-- Retention (the system/retention playbook) deletes whole terminal executions. The event
-- log stays append-only for every role: no service's role may DELETE from noetl.event.
-- The one way out of the log is this function, which runs with its owner's rights
-- (SECURITY DEFINER) and which only the materializer's role may execute
-- (internal/schema/roles.go), so the materializer stays the sole writer of the log. It
-- deletes an execution only when it is terminal, with its events and timers (a
-- data-modifying WITH runs whether or not the query reads it), locking the rows in id
-- order as the writer does, and returns what it deleted.
-- +goose StatementBegin
CREATE FUNCTION noetl.purge_executions(p_ids text[])
RETURNS TABLE (tenant text, execution_id text, events bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM noetl.execution x
        WHERE x.execution_id = ANY (p_ids) AND x.status IN (2, 3, 4)
        ORDER BY x.execution_id FOR UPDATE;
    RETURN QUERY
    WITH gone AS (
        DELETE FROM noetl.execution x
        WHERE x.execution_id = ANY (p_ids) AND x.status IN (2, 3, 4)
        RETURNING x.tenant, x.execution_id),
    ev AS (
        DELETE FROM noetl.event v USING gone g WHERE v.execution_id = g.execution_id
        RETURNING v.execution_id),
    tm AS (
        DELETE FROM noetl.timer t USING gone g WHERE t.execution_id = g.execution_id
        RETURNING t.execution_id)
    SELECT g.tenant, g.execution_id,
        (SELECT count(*) FROM ev WHERE ev.execution_id = g.execution_id)
    FROM gone g ORDER BY g.execution_id;
END
$$;
-- +goose StatementEnd
REVOKE ALL ON FUNCTION noetl.purge_executions(text[]) FROM PUBLIC;

-- Retention finds terminal executions by the time they ended.
CREATE INDEX execution_ended ON noetl.execution (ended_at) WHERE ended_at IS NOT NULL;

-- +goose Down
DROP INDEX noetl.execution_ended;
DROP FUNCTION noetl.purge_executions(text[]);
