-- +goose Up
-- noetl.append_events retires: the materializer's writer classifies a batch itself, under
-- the same per-execution row locks and in the same transaction (lock the executions, probe
-- the log for the batch's event ids, then insert the new events and update the projections
-- with set-based statements), which costs Postgres a fraction of the function's work.
DROP FUNCTION IF EXISTS noetl.append_events(text[], text[], text[], text[], text[], text[], bytea[], text[], bigint[], text[], timestamptz, text[], timestamptz[]);

-- +goose Down
-- The function is not restored: the writers that called it predate this migration.
SELECT 1;
