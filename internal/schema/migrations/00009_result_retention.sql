-- +goose Up
-- Tables stored as Arrow IPC carry their column schema; results expire after a retention
-- period, and the resultstore's sweeper finds expired ones through this index.
ALTER TABLE noetl.result ADD COLUMN schema_json text NOT NULL DEFAULT '';
CREATE INDEX result_expires ON noetl.result (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX result_step ON noetl.result (tenant, execution_id, step, created_at);

-- +goose Down
DROP INDEX noetl.result_step;
DROP INDEX noetl.result_expires;
ALTER TABLE noetl.result DROP COLUMN schema_json;
