-- +goose Up
-- An execution's labels, from its playbook.started, projected by the materializer when it
-- creates the row; ListExecutions filters by containment (labels @> the asked-for labels),
-- which the GIN index answers. The materializer already may insert and update the table,
-- the statebuilder read it (internal/schema/roles.go grants by table).
ALTER TABLE noetl.execution ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
CREATE INDEX execution_labels ON noetl.execution USING gin (labels jsonb_path_ops);

-- +goose Down
DROP INDEX noetl.execution_labels;
ALTER TABLE noetl.execution DROP COLUMN labels;
