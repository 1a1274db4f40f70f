-- +goose Up
CREATE SCHEMA IF NOT EXISTS noetl;

-- Playbook catalog: one row per registered version. Written by the orchestrator.
CREATE TABLE noetl.catalog (
    tenant          text        NOT NULL,
    path            text        NOT NULL,
    version         bigint      NOT NULL,
    name            text        NOT NULL DEFAULT '',
    description     text        NOT NULL DEFAULT '',
    content         text        NOT NULL,
    content_sha256  text        NOT NULL,
    warnings        text[]      NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, path, version)
);

-- Named credentials. Written by the orchestrator, resolved by workers through it.
CREATE TABLE noetl.credential (
    tenant      text        NOT NULL,
    name        text        NOT NULL,
    type        text        NOT NULL DEFAULT '',
    data        jsonb       NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);

-- Execution summary: a projection of the event log kept by the materializer in the same
-- transaction as the events. last_seq is the per-execution sequence counter.
CREATE TABLE noetl.execution (
    execution_id         text        PRIMARY KEY,
    tenant               text        NOT NULL,
    playbook_path        text        NOT NULL DEFAULT '',
    playbook_version     bigint      NOT NULL DEFAULT 0,
    status               smallint    NOT NULL DEFAULT 1,
    last_seq             bigint      NOT NULL DEFAULT 0,
    parent_execution_id  text        NOT NULL DEFAULT '',
    started_at           timestamptz NOT NULL DEFAULT now(),
    ended_at             timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX execution_tenant_started ON noetl.execution (tenant, started_at DESC, execution_id DESC);

-- The event log. Only the materializer writes it. body is the protobuf-encoded event.
CREATE TABLE noetl.event (
    execution_id  text        NOT NULL,
    seq           bigint      NOT NULL,
    event_id      text        NOT NULL,
    tenant        text        NOT NULL,
    type          text        NOT NULL,
    step          text        NOT NULL DEFAULT '',
    command_id    text        NOT NULL DEFAULT '',
    committed_at  timestamptz NOT NULL DEFAULT now(),
    body          bytea       NOT NULL,
    PRIMARY KEY (execution_id, seq),
    UNIQUE (execution_id, event_id)
);

-- Timers (retries with delay, schedules). Written by the materializer.
CREATE TABLE noetl.timer (
    execution_id  text        NOT NULL,
    timer_id      text        NOT NULL,
    tenant        text        NOT NULL,
    due_at        timestamptz NOT NULL,
    fired         boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (execution_id, timer_id)
);
CREATE INDEX timer_due ON noetl.timer (due_at) WHERE NOT fired;

-- State snapshots written by the statebuilder to bound cold rebuilds.
CREATE TABLE noetl.state_snapshot (
    execution_id  text        PRIMARY KEY,
    seq           bigint      NOT NULL,
    body          bytea       NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Results held by reference. Written by the resultstore.
CREATE TABLE noetl.result (
    tenant        text        NOT NULL,
    result_id     text        NOT NULL,
    execution_id  text        NOT NULL,
    step          text        NOT NULL DEFAULT '',
    content_type  text        NOT NULL,
    size          bigint      NOT NULL,
    sha256        text        NOT NULL,
    row_count     bigint      NOT NULL DEFAULT 0,
    extracted     bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    PRIMARY KEY (tenant, result_id)
);
CREATE INDEX result_execution ON noetl.result (tenant, execution_id);

CREATE TABLE noetl.result_chunk (
    tenant     text   NOT NULL,
    result_id  text   NOT NULL,
    idx        int    NOT NULL,
    data       bytea  NOT NULL,
    PRIMARY KEY (tenant, result_id, idx)
);

-- +goose Down
DROP SCHEMA noetl CASCADE;
