-- +goose Up
-- noetl.append_events gains durable timers: a committed timer.scheduled inserts its
-- noetl.timer row and a committed timer.fired marks it fired, in the same statement as
-- the events (so the projection never disagrees with the log). A terminal event also
-- retires the execution's pending timers.
DROP FUNCTION noetl.append_events(text[], text[], text[], text[], text[], text[], bytea[], text[], bigint[], text[], timestamptz);
ALTER TABLE noetl.timer ADD COLUMN step text NOT NULL DEFAULT '';
-- +goose StatementBegin
CREATE FUNCTION noetl.append_events(
    p_exec text[], p_event text[], p_tenant text[], p_type text[], p_step text[], p_cmd text[],
    p_body bytea[], p_path text[], p_version bigint[], p_parent text[], p_now timestamptz,
    p_timer text[], p_due timestamptz[])
RETURNS TABLE (o_idx int, o_seq bigint, o_outcome smallint, o_exec_seq bigint, o_exec_status smallint)
LANGUAGE plpgsql AS $fn$
DECLARE
    n        int := coalesce(array_length(p_exec, 1), 0);
    cur      text := NULL;
    v_found  boolean := false;
    v_tenant text;
    v_last   bigint;
    v_seq    bigint;
    v_status smallint;
    v_ended  timestamptz;
BEGIN
    INSERT INTO noetl.execution AS e (execution_id, tenant, playbook_path, playbook_version, parent_execution_id, started_at)
    SELECT p_exec[k], p_tenant[k], p_path[k], p_version[k], p_parent[k], p_now
    FROM generate_subscripts(p_exec, 1) AS k
    WHERE p_type[k] = 'playbook.started'
    ON CONFLICT (execution_id) DO NOTHING;

    PERFORM 1 FROM noetl.execution WHERE execution_id = ANY (p_exec) ORDER BY execution_id FOR UPDATE;

    FOR i IN 1 .. n LOOP
        IF cur IS DISTINCT FROM p_exec[i] THEN
            IF v_found AND v_seq <> v_last THEN
                UPDATE noetl.execution SET last_seq = v_seq, status = v_status,
                    ended_at = coalesce(v_ended, ended_at), updated_at = p_now
                WHERE execution_id = cur;
            END IF;
            cur := p_exec[i];
            SELECT x.tenant, x.last_seq, x.status INTO v_tenant, v_last, v_status
            FROM noetl.execution x WHERE x.execution_id = cur;
            v_found := FOUND;
            v_seq := v_last;
            v_ended := NULL;
        END IF;
        o_idx := i;
        o_seq := 0;
        IF NOT v_found OR v_tenant <> p_tenant[i] THEN
            o_outcome := 2;
        ELSIF v_status IN (2, 3, 4) THEN
            IF EXISTS (SELECT 1 FROM noetl.event WHERE execution_id = cur AND event_id = p_event[i]) THEN
                o_outcome := 1;
            ELSE
                o_outcome := 2;
            END IF;
        ELSE
            INSERT INTO noetl.event (execution_id, seq, event_id, tenant, type, step, command_id, committed_at, body)
            VALUES (cur, v_seq + 1, p_event[i], p_tenant[i], p_type[i], p_step[i], p_cmd[i], p_now, p_body[i])
            ON CONFLICT (execution_id, event_id) DO NOTHING;
            IF FOUND THEN
                v_seq := v_seq + 1;
                o_seq := v_seq;
                o_outcome := 0;
                IF p_type[i] = 'timer.scheduled' THEN
                    INSERT INTO noetl.timer (execution_id, timer_id, tenant, due_at, step)
                    VALUES (cur, p_timer[i], p_tenant[i], p_due[i], p_step[i])
                    ON CONFLICT (execution_id, timer_id) DO NOTHING;
                ELSIF p_type[i] = 'timer.fired' THEN
                    UPDATE noetl.timer SET fired = true WHERE execution_id = cur AND timer_id = p_timer[i];
                END IF;
                IF p_type[i] IN ('playbook.completed', 'playbook.failed', 'playbook.cancelled') THEN
                    UPDATE noetl.timer SET fired = true WHERE execution_id = cur AND NOT fired;
                END IF;
                IF p_type[i] = 'playbook.completed' THEN v_status := 2; v_ended := p_now;
                ELSIF p_type[i] = 'playbook.failed' THEN v_status := 3; v_ended := p_now;
                ELSIF p_type[i] = 'playbook.cancelled' THEN v_status := 4; v_ended := p_now;
                END IF;
            ELSE
                o_outcome := 1;
            END IF;
        END IF;
        o_exec_seq := coalesce(v_seq, 0);
        o_exec_status := coalesce(v_status, 0);
        RETURN NEXT;
    END LOOP;
    IF v_found AND v_seq <> v_last THEN
        UPDATE noetl.execution SET last_seq = v_seq, status = v_status,
            ended_at = coalesce(v_ended, ended_at), updated_at = p_now
        WHERE execution_id = cur;
    END IF;
END
$fn$;
-- +goose StatementEnd

-- +goose Down
SELECT 1;
