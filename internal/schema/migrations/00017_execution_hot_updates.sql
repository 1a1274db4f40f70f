-- +goose Up
-- Every committed batch updates its executions' rows (last_seq, updated_at). An index on
-- updated_at made each of those updates write a new entry into every index of the table,
-- labels' GIN index included. Running executions are now found through an index that names
-- no column a step changes (status only changes when an execution starts or ends), so a
-- step's update is a heap-only tuple update into the free space fillfactor leaves on the
-- row's page. The reconciler's and the gauge's queries (running, not updated since a time)
-- walk this index: running executions are bounded by the in-flight limits.
DROP INDEX noetl.execution_running_updated;
CREATE INDEX execution_running_started ON noetl.execution (started_at DESC, execution_id DESC) WHERE status = 1;
ALTER TABLE noetl.execution SET (fillfactor = 70);

-- +goose Down
ALTER TABLE noetl.execution RESET (fillfactor);
DROP INDEX noetl.execution_running_started;
CREATE INDEX execution_running_updated ON noetl.execution (updated_at) WHERE status = 1;
