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

-- noetl.append_events, set-based: the same contract as migration 00005's (dedupe, refuse
-- after the terminal event or for an unknown execution or another tenant, gap-free seq,
-- projections), computed over the whole batch in a few statements instead of one INSERT
-- per event, which made the log several times slower to write than a plain COPY. After the
-- execution rows are locked, one statement classifies every input row (a fresh snapshot,
-- so events committed by another writer before the lock was granted are seen), then the
-- new events are inserted at once. o_exec_seq and o_exec_status are the execution's
-- counters after the row (0 for an unknown execution).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION noetl.append_events(
    p_exec text[], p_event text[], p_tenant text[], p_type text[], p_step text[], p_cmd text[],
    p_body bytea[], p_path text[], p_version bigint[], p_parent text[], p_now timestamptz,
    p_timer text[], p_due timestamptz[])
RETURNS TABLE (o_idx int, o_seq bigint, o_outcome smallint, o_exec_seq bigint, o_exec_status smallint)
LANGUAGE plpgsql
-- Every read here is by key, in batches of about a thousand rows: an index probe is always
-- right, whatever the statistics say (a log that grew since the last ANALYZE looked small
-- and was scanned whole per batch), and compiling a batch's plan is never worth it.
SET enable_seqscan = off
SET jit = off
AS $fn$
DECLARE
    v_seq    bigint[];
    v_out    smallint[];
    v_xseq   bigint[];
    v_xst    smallint[];
BEGIN
    -- Arrays are read with unnest, never subscripted: finding the k-th element of an array
    -- of variable-length values walks the array, which made a batch quadratic.
    INSERT INTO noetl.execution AS e (execution_id, tenant, playbook_path, playbook_version, parent_execution_id, started_at)
    SELECT r.ex, r.tn, r.path, r.ver, r.parent, p_now
    FROM unnest(p_exec, p_tenant, p_type, p_path, p_version, p_parent) AS r(ex, tn, ty, path, ver, parent)
    WHERE r.ty = 'playbook.started'
    ON CONFLICT (execution_id) DO NOTHING;

    PERFORM 1 FROM noetl.execution WHERE execution_id = ANY (p_exec) ORDER BY execution_id FOR UPDATE;

    -- Classify. valid: the execution exists and the tenant matches. Among the valid rows of
    -- one event id the first occurrence decides (later ones are duplicates of it, or
    -- refused with it): a duplicate when logged, refused when the execution ended before
    -- the batch or ends earlier in it, else inserted with the next seq.
    WITH inp AS (
        SELECT r.i::int AS i, r.ex, r.ev, r.tn, r.ty
        FROM unnest(p_exec, p_event, p_tenant, p_type) WITH ORDINALITY AS r(ex, ev, tn, ty, i)
    ), st AS (
        SELECT inp.*, x.execution_id IS NOT NULL AS known, x.execution_id IS NOT NULL AND x.tenant = inp.tn AS valid,
               coalesce(x.last_seq, 0) AS last_seq, coalesce(x.status, 0)::smallint AS status,
               EXISTS (SELECT 1 FROM noetl.event e WHERE e.execution_id = inp.ex AND e.event_id = inp.ev) AS in_log
        FROM inp LEFT JOIN noetl.execution x ON x.execution_id = inp.ex
    ), pre AS (
        -- pre: 0 candidate, 1 duplicate of the log, 2 refused
        SELECT st.*, min(i) OVER (PARTITION BY ex, ev, valid) AS first_i,
               CASE WHEN NOT valid THEN 2 WHEN in_log THEN 1 WHEN status IN (2, 3, 4) THEN 2 ELSE 0 END AS pre
        FROM st
    ), term AS (
        -- each execution's first new terminal event in the batch
        SELECT DISTINCT ON (ex) ex, i AS term_i,
               CASE ty WHEN 'playbook.completed' THEN 2 WHEN 'playbook.failed' THEN 3 ELSE 4 END::smallint AS term_status
        FROM pre
        WHERE pre = 0 AND i = first_i AND ty IN ('playbook.completed', 'playbook.failed', 'playbook.cancelled')
        ORDER BY ex, i
    ), outc AS (
        SELECT p.*, t.term_i, t.term_status, CASE
                WHEN pre <> 0 THEN pre
                WHEN t.term_i IS NOT NULL AND first_i > t.term_i THEN 2
                WHEN i <> first_i THEN 1
                ELSE 0 END::smallint AS outcome
        FROM pre p LEFT JOIN term t USING (ex)
    ), numbered AS (
        SELECT o.*, o.last_seq + count(*) FILTER (WHERE outcome = 0) OVER (PARTITION BY ex ORDER BY i) AS run_seq
        FROM outc o
    )
    SELECT array_agg(CASE WHEN outcome = 0 THEN run_seq ELSE 0 END ORDER BY i),
           array_agg(outcome ORDER BY i),
           array_agg(CASE WHEN known THEN run_seq ELSE 0 END ORDER BY i),
           array_agg(CASE WHEN NOT known THEN 0::smallint
                          WHEN term_i IS NOT NULL AND i >= term_i THEN term_status
                          ELSE status END ORDER BY i)
    INTO v_seq, v_out, v_xseq, v_xst
    FROM numbered;

    INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body)
    SELECT r.ex, r.seq, r.ev, r.tn, r.ty, r.st, r.cmd, p_now, r.body
    FROM unnest(p_exec, v_seq, p_event, p_tenant, p_type, p_step, p_cmd, p_body, v_out) AS r(ex, seq, ev, tn, ty, st, cmd, body, outcome)
    WHERE r.outcome = 0;

    -- The projection: each execution's counters after its last row.
    UPDATE noetl.execution x
    SET last_seq = a.seq, status = a.status, updated_at = p_now,
        ended_at = CASE WHEN a.status IN (2, 3, 4) AND x.status NOT IN (2, 3, 4) THEN p_now ELSE x.ended_at END
    FROM (SELECT DISTINCT ON (r.ex) r.ex, r.seq, r.status
          FROM unnest(p_exec, v_xseq, v_xst) WITH ORDINALITY AS r(ex, seq, status, k)
          WHERE r.status <> 0
          ORDER BY r.ex, r.k DESC) a
    WHERE x.execution_id = a.ex AND x.last_seq <> a.seq;

    -- Timers, when the batch commits any: timer.scheduled inserts its row, timer.fired marks
    -- it fired, a terminal event retires the execution's pending ones (in that order, so a
    -- timer scheduled and fired or retired in one batch ends fired).
    IF EXISTS (SELECT 1 FROM unnest(p_type, v_out) AS r(ty, outcome)
               WHERE r.outcome = 0 AND r.ty IN ('timer.scheduled', 'timer.fired', 'playbook.completed', 'playbook.failed', 'playbook.cancelled')) THEN
        INSERT INTO noetl.timer (execution_id, timer_id, tenant, due_at, step)
        SELECT r.ex, r.timer, r.tn, r.due, r.st
        FROM unnest(p_exec, p_timer, p_tenant, p_due, p_step, p_type, v_out) WITH ORDINALITY AS r(ex, timer, tn, due, st, ty, outcome, k)
        WHERE r.outcome = 0 AND r.ty = 'timer.scheduled'
        ORDER BY r.k
        ON CONFLICT (execution_id, timer_id) DO NOTHING;
        UPDATE noetl.timer t SET fired = true
        FROM unnest(p_exec, p_timer, p_type, v_out) AS r(ex, timer, ty, outcome)
        WHERE r.outcome = 0 AND r.ty = 'timer.fired' AND t.execution_id = r.ex AND t.timer_id = r.timer;
        UPDATE noetl.timer t SET fired = true
        FROM unnest(p_exec, p_type, v_out) AS r(ex, ty, outcome)
        WHERE r.outcome = 0 AND r.ty IN ('playbook.completed', 'playbook.failed', 'playbook.cancelled')
          AND t.execution_id = r.ex AND NOT t.fired;
    END IF;

    RETURN QUERY SELECT r.k::int, r.seq, r.outcome, r.xseq, r.xst
    FROM unnest(v_seq, v_out, v_xseq, v_xst) WITH ORDINALITY AS r(seq, outcome, xseq, xst, k)
    ORDER BY r.k;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE noetl.materializer_partition;
DROP TABLE noetl.materializer_replica;
