-- +goose Up
-- The materializer commits a batch in one round trip when it can predict, from the heads it
-- committed last, what its first round trip would find (services/materializer/internal/
-- writer/fast.go): it sends the whole transaction at once and guards it with this function,
-- which aborts the transaction unless the prediction holds, so nothing of a mispredicted
-- batch is written. The writer recognises the error code and commits the batch again the
-- two-round-trip way. Only the materializer's role may execute it (internal/schema/roles.go).
-- +goose StatementBegin
CREATE FUNCTION noetl.writer_expect(ok boolean)
RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'the log moved since this writer last committed it' USING ERRCODE = 'NX001';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION noetl.writer_expect(boolean);
