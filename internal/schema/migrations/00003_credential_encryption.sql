-- +goose Up
-- Credentials are stored encrypted: ciphertext is version byte 1, a 12-byte random nonce and
-- the AES-256-GCM sealed JSON object, with the tenant and name as additional data (see the
-- orchestrator's credential sealer). data held plaintext before; it is kept nullable only so
-- that rows written before this migration can be sealed by the orchestrator when it starts
-- with NOETL_ENCRYPTION_KEY (it then clears data). New rows never fill it.
ALTER TABLE noetl.credential ADD COLUMN ciphertext bytea;
ALTER TABLE noetl.credential ALTER COLUMN data DROP NOT NULL;
ALTER TABLE noetl.credential ADD CONSTRAINT credential_sealed_or_legacy
    CHECK (ciphertext IS NOT NULL OR data IS NOT NULL);

-- +goose Down
-- Encrypted rows cannot be turned back into plaintext in SQL: they are dropped.
ALTER TABLE noetl.credential DROP CONSTRAINT credential_sealed_or_legacy;
DELETE FROM noetl.credential WHERE data IS NULL;
ALTER TABLE noetl.credential ALTER COLUMN data SET NOT NULL;
ALTER TABLE noetl.credential DROP COLUMN ciphertext;
