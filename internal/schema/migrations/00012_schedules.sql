-- +goose Up
-- Schedules and their ticks are the orchestrator's own rows (internal/schema/roles.go): the
-- scheduler claims due schedules with FOR UPDATE SKIP LOCKED, records their ticks and
-- advances next_fire_at in one transaction, then starts each recorded tick with an
-- idempotency key derived from (id, fire_at), so a tick starts one execution however many
-- replicas run and wherever one crashes.
CREATE TABLE noetl.schedule (
    tenant            text        NOT NULL,
    name              text        NOT NULL,
    id                uuid        NOT NULL UNIQUE,
    cron              text        NOT NULL DEFAULT '',
    interval_ms       bigint      NOT NULL DEFAULT 0,
    time_zone         text        NOT NULL DEFAULT 'UTC',
    path              text        NOT NULL,
    version           bigint      NOT NULL DEFAULT 0,
    workload          jsonb       NOT NULL DEFAULT '{}',
    catch_up          text        NOT NULL DEFAULT 'skip',
    max_catch_up      integer     NOT NULL DEFAULT 10,
    paused            boolean     NOT NULL DEFAULT false,
    anchor_at         timestamptz NOT NULL,
    next_fire_at      timestamptz NOT NULL,
    last_fire_at      timestamptz,
    last_execution_id text        NOT NULL DEFAULT '',
    created_by        text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);
CREATE INDEX schedule_due ON noetl.schedule (next_fire_at) WHERE NOT paused;

-- A recorded tick; started_at is set once its start is acknowledged (execution_id), or
-- refused for good (error: the playbook is gone, the workload too large, ...).
CREATE TABLE noetl.schedule_tick (
    schedule_id  uuid        NOT NULL REFERENCES noetl.schedule (id) ON DELETE CASCADE,
    fire_at      timestamptz NOT NULL,
    execution_id text,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    error        text        NOT NULL DEFAULT '',
    PRIMARY KEY (schedule_id, fire_at)
);
CREATE INDEX schedule_tick_pending ON noetl.schedule_tick (recorded_at) WHERE started_at IS NULL;

-- +goose Down
DROP TABLE noetl.schedule_tick;
DROP TABLE noetl.schedule;
