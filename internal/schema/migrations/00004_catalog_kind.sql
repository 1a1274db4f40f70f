-- +goose Up
-- The catalog records each entry's kind (Playbook today), as NoETL's catalog does, so
-- queries written for NoETL (SELECT kind, count(*) FROM noetl.catalog ...) work.
ALTER TABLE noetl.catalog ADD COLUMN kind text NOT NULL DEFAULT 'Playbook';

-- +goose Down
ALTER TABLE noetl.catalog DROP COLUMN kind;
