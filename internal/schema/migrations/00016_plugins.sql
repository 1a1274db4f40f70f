-- +goose Up
-- WebAssembly plug-ins are the orchestrator's own rows (internal/schema/roles.go): each
-- registration of a module's bytes under a path is the next version of that path, unless
-- the bytes equal the latest version's (content_sha256), which it then answers. Versions
-- are immutable; workers fetch a module by (tenant, path, version) and cache its compiled
-- form by digest.
CREATE TABLE noetl.plugin (
    tenant         text        NOT NULL,
    path           text        NOT NULL,
    version        bigint      NOT NULL,
    module         bytea       NOT NULL,
    content_sha256 text        NOT NULL,
    description    text        NOT NULL DEFAULT '',
    created_by     text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, path, version)
);

-- +goose Down
DROP TABLE noetl.plugin;
