-- +goose Up
-- A system principal lists the executions of every tenant newest first
-- (ListExecutions with tenant "-"): this index keeps that a walk from the page token's key,
-- as execution_tenant_started does within a tenant, instead of a sort of the whole table.
CREATE INDEX execution_started ON noetl.execution (started_at DESC, execution_id DESC);

-- +goose Down
DROP INDEX noetl.execution_started;
