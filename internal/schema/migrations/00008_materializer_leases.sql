-- +goose Up
-- Materializer replicas share the partitions of NOETL_EVENTS through leases. A group is the
-- materializers of one consumer name (NOETL_MATERIALIZER_CONSUMER); each replica of a
-- group heartbeats in materializer_replica, and owns the partitions whose lease it holds
-- and renews before expires_at. Times are Postgres's clock, so replicas' clocks need not
-- agree. The lease saves work, it does not make the log correct: the writer serialises
-- per execution and dedupes by event id whoever commits.
CREATE TABLE noetl.materializer_replica (
    consumer    text        NOT NULL,
    replica     text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (consumer, replica)
);

-- One row per partition of a group: its lease (owner '' is none) and its cursor, the
-- NOETL_EVENTS stream sequence up to which every event of the partition has been committed
-- and forwarded. A new owner reads the partition from the cursor on.
CREATE TABLE noetl.materializer_partition (
    consumer    text        NOT NULL,
    partition   int         NOT NULL,
    owner       text        NOT NULL DEFAULT '',
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    stream_seq  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, partition)
);

-- +goose Down
DROP TABLE noetl.materializer_partition;
DROP TABLE noetl.materializer_replica;
