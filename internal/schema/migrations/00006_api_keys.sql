-- +goose Up
-- API keys, written and read only by the orchestrator (the gateway verifies keys through
-- its internal ApiKeyService). A key is noetl_<id>_<secret>: id is public and is the
-- primary key; only the SHA-256 digest of the high-entropy secret is stored, compared in
-- constant time. last_used_at is written at most once a minute per key.
CREATE TABLE noetl.api_key (
    id            text        PRIMARY KEY,
    tenant        text        NOT NULL,
    roles         text[]      NOT NULL,
    name          text        NOT NULL DEFAULT '',
    secret_sha256 bytea       NOT NULL CHECK (length(secret_sha256) = 32),
    created_by    text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz
);
CREATE INDEX api_key_tenant_id ON noetl.api_key (tenant, id);

-- +goose Down
DROP TABLE noetl.api_key;
