-- +goose Up
-- The reconciler and the running-executions gauge look for running executions by the
-- time their log last grew; this partial index keeps that cheap however many finished
-- executions the table holds.
CREATE INDEX execution_running_updated ON noetl.execution (updated_at) WHERE status = 1;

-- +goose Down
DROP INDEX noetl.execution_running_updated;
