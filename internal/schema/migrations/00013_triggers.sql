-- +goose Up
-- Triggers are the orchestrator's own rows (internal/schema/roles.go). A webhook trigger
-- keeps its HMAC signing secret sealed like a credential (AES-256-GCM under
-- NOETL_ENCRYPTION_KEY, bound to the tenant and the trigger's id); a NATS trigger names the
-- subject and the JetStream stream whose durable consumer (noetl-trigger-<id>) the
-- orchestrators share. Each delivery starts with the idempotency key
-- trigger/<id>/<delivery id>, so a redelivery starts nothing new.
CREATE TABLE noetl.trigger (
    tenant            text        NOT NULL,
    name              text        NOT NULL,
    id                uuid        NOT NULL UNIQUE,
    kind              text        NOT NULL CHECK (kind IN ('webhook', 'nats')),
    path              text        NOT NULL,
    version           bigint      NOT NULL DEFAULT 0,
    workload          jsonb       NOT NULL DEFAULT '{}',
    secret            bytea,
    subject           text        NOT NULL DEFAULT '',
    stream            text        NOT NULL DEFAULT '',
    last_fire_at      timestamptz,
    last_execution_id text        NOT NULL DEFAULT '',
    created_by        text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);
CREATE INDEX trigger_nats ON noetl.trigger (id) WHERE kind = 'nats';

-- +goose Down
DROP TABLE noetl.trigger;
