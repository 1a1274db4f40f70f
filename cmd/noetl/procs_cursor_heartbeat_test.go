package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
)

// cursorFramePlaybook drains <schema>.queue (3 rows) with one claim slot, the frame
// processed whole by one body attempt at most (max_attempts: 1): a python gate that waits
// for the file <gate> (two minutes at most), then a postgres insert of the frame's rows
// into <schema>.effect, whose primary key refuses a row recorded twice. %[2]s is the
// frame's bounds.
const cursorFramePlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cursor_%[1]s, path: tests/cursor_%[1]s}
workload: {gate: "", pg: ""}
workflow:
  - step: start
    loop:
      cursor:
        kind: postgres
        connection_string: "{{ workload.pg }}"
        claim: |
          WITH mine AS (
            SELECT id FROM %[1]s.queue WHERE claimed_by = $1
          ), fresh AS (
            UPDATE %[1]s.queue SET claimed_by = $1
            WHERE id IN (SELECT id FROM %[1]s.queue WHERE claimed_by IS NULL ORDER BY id LIMIT $2::int FOR UPDATE SKIP LOCKED)
              AND NOT EXISTS (SELECT 1 FROM mine)
            RETURNING id
          )
          SELECT id FROM mine UNION ALL SELECT id FROM fresh ORDER BY id
        params: ["{{ command_id }}", "{{ cursor.max_rows }}"]
      iterator: frame
      spec:
        mode: cursor
        max_in_flight: 1
        frame: {max_rows: 10, process: frame, %[2]s}
    tool:
      - name: gate
        kind: python
        input: {rows: "{{ frame }}", gate: "{{ workload.gate }}"}
        code: |
          import json, os, time
          deadline = time.time() + 120
          while not os.path.exists(gate) and time.time() < deadline:
              time.sleep(0.05)
          result = {"ids": json.dumps([r["id"] for r in rows])}
      - name: effect
        kind: postgres
        connection_string: "{{ workload.pg }}"
        command: INSERT INTO %[1]s.effect (id, attempt) SELECT j::int, $2::int FROM jsonb_array_elements_text($1::jsonb) AS j
        params: ["{{ gate.ids }}", "{{ iter._attempt }}"]
    next:
      arcs:
        - step: end
  - step: end
`

// cursorQueue creates, in schema, the three-row queue and the effect table that
// cursorFramePlaybook drains and records into.
func cursorQueue(schema string) string {
	return fmt.Sprintf(`CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.queue (id int PRIMARY KEY, claimed_by text);
		CREATE TABLE %[1]s.effect (id int PRIMARY KEY REFERENCES %[1]s.queue (id), attempt int NOT NULL);
		INSERT INTO %[1]s.queue (id) SELECT generate_series(1, 3);
`, schema)
}

// TestCursorHeartbeatsKeepALongFrameAndMaxSecondsStopsOne runs two cursor loops over the
// service processes. In the first a frame's body outlives its lease (4 s) several times
// over while its worker heartbeats every second: the lease is renewed (the test opens the
// body's gate only once a renewal's timer fired), the frame is never issued again, and
// its rows are recorded exactly once. In the second a body waits past max_seconds (2 s):
// its worker stops it, the attempt fails with deadline_exceeded, and after max_attempts
// the frame's rows count as failed, none recorded.
func TestCursorHeartbeatsKeepALongFrameAndMaxSecondsStopsOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	ctx := context.Background()
	pg := p.connect(t, cursorQueue("hb")+cursorQueue("ms"))
	p.register(t, fmt.Sprintf(cursorFramePlaybook, "hb", "lease_seconds: 4, heartbeat_seconds: 1, max_attempts: 1"))
	p.register(t, fmt.Sprintf(cursorFramePlaybook, "ms", "lease_seconds: 60, max_seconds: 2, max_attempts: 2"))
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })

	// Heartbeats: the gate opens once the lease was renewed and its renewal's timer fired
	// too, so the body has run past two leases with its frame still held.
	id := p.startExecution(t, "tests/cursor_hb", map[string]any{"gate": gate, "pg": p.pgURL})
	testkit.WaitFor(t, 2*time.Minute, func() error {
		evs, err := p.events(id)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Type == "timer.fired" && strings.HasPrefix(fmt.Sprint(ev.Payload["timer_id"]), "lease.1:") {
				return nil
			}
		}
		return fmt.Errorf("no renewal's lease timer fired yet (%d events)", len(evs))
	})
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	x := p.waitExecution(t, id)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
	sum := cursorSummary(t, x)
	require.EqualValues(t, 3, sum["processed"], "%v", sum)
	require.EqualValues(t, 0, sum["failed"], "%v", sum)
	require.EqualValues(t, 1, sum["attempts"], "the frame was never issued again: %v", sum)
	require.EqualValues(t, 0, sum["reissued"], "%v", sum)
	require.GreaterOrEqual(t, sum["renewals"], 2.0, "%v", sum)
	require.GreaterOrEqual(t, sum["heartbeats"], 1.0, "%v", sum)
	var effects, distinct, firstAttempt int
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE attempt = 1) FROM hb.effect`).Scan(&effects, &distinct, &firstAttempt))
	require.Equal(t, []int{3, 3, 3}, []int{effects, distinct, firstAttempt}, "every row recorded once, by the first attempt")
	evs, err := p.events(id)
	require.NoError(t, err)
	beats := 0
	for _, ev := range evs {
		if ev.Type == "command.heartbeat" {
			beats++
			require.Equal(t, "start", ev.Step, "only the cursor's body heartbeats")
		}
	}
	require.Positive(t, beats)

	// max_seconds: the gate is open, so the body would finish at once; a second gate that
	// never opens holds it past max_seconds on each attempt.
	id = p.startExecution(t, "tests/cursor_ms", map[string]any{"gate": filepath.Join(dir, "never"), "pg": p.pgURL})
	x = p.waitExecution(t, id)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "the loop drains, its frame failed: %v", x)
	sum = cursorSummary(t, x)
	require.EqualValues(t, 3, sum["failed"], "%v", sum)
	require.EqualValues(t, 0, sum["processed"], "%v", sum)
	require.EqualValues(t, 2, sum["attempts"], "each attempt stopped at max_seconds, max_attempts of them: %v", sum)
	require.Contains(t, sum["last_error"], "ran past its timeout of 2s (loop.spec.frame.max_seconds)", "%v", sum)
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*) FROM ms.effect`).Scan(&effects))
	require.Zero(t, effects, "a stopped body records nothing")
}

// TestCursorHeartbeatsOfAReplacementWorkerKeepTheLease runs a frame (lease 4 s, a
// heartbeat a second, one attempt) on a worker that stops mid-frame after six heartbeats,
// its drain timeout zero: it gives the body's command back, and the commands stream
// delivers it again to a second worker, which runs the body from the start and numbers its
// heartbeats from 1 again. Those heartbeats name their delivery, so they are committed
// rather than dropped as copies of the first worker's, and keep the lease: the frame is
// never issued again, and its rows are recorded once.
func TestCursorHeartbeatsOfAReplacementWorkerKeepTheLease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	ctx := context.Background()
	pg := p.connect(t, cursorQueue("rd"))
	stopPid(t, p.pids["worker"], syscall.SIGTERM)
	first := p.startService(t, "worker", "NOETL_WORKER_ID=rd-first", "NOETL_WORKER_DRAIN_TIMEOUT=0s")
	p.register(t, fmt.Sprintf(cursorFramePlaybook, "rd", "lease_seconds: 4, heartbeat_seconds: 1, max_attempts: 1"))
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	id := p.startExecution(t, "tests/cursor_rd", map[string]any{"gate": gate, "pg": p.pgURL})

	// beats counts the heartbeats committed per delivery.
	beats := func() (map[string]int, error) {
		evs, err := p.events(id)
		if err != nil {
			return nil, err
		}
		n := map[string]int{}
		for _, ev := range evs {
			if ev.Type == "command.heartbeat" {
				n[fmt.Sprint(ev.Payload["delivery"])]++
			}
		}
		return n, nil
	}
	var firstDelivery string
	testkit.WaitFor(t, 2*time.Minute, func() error {
		n, err := beats()
		if err != nil {
			return err
		}
		for d, k := range n {
			if k >= 6 {
				firstDelivery = d
				return nil
			}
		}
		return fmt.Errorf("heartbeats so far: %v", n)
	})
	// The second worker starts only now, so the first delivery went to the first.
	p.startService(t, "worker", "NOETL_WORKER_ID=rd-second")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM), "stop the first worker mid-frame")
	require.Zero(t, first.wait(t, time.Minute))

	// The replacement's first six heartbeats (as many as the first worker sent, over a
	// lease and a half) are in the log: with the first worker's ids they would have been
	// dropped, and the lease would have run out meanwhile.
	testkit.WaitFor(t, 2*time.Minute, func() error {
		n, err := beats()
		if err != nil {
			return err
		}
		for d, k := range n {
			if d != firstDelivery && k >= 6 {
				return nil
			}
		}
		return fmt.Errorf("heartbeats so far: %v (first delivery %s)", n, firstDelivery)
	})
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	x := p.waitExecution(t, id)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
	sum := cursorSummary(t, x)
	require.EqualValues(t, 3, sum["processed"], "%v", sum)
	require.EqualValues(t, 0, sum["failed"], "the lease held through the replacement: %v", sum)
	require.EqualValues(t, 1, sum["attempts"], "the frame was never issued again: %v", sum)
	require.GreaterOrEqual(t, sum["renewals"], 2.0, "%v", sum)
	var effects, distinct int
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*), count(DISTINCT id) FROM rd.effect`).Scan(&effects, &distinct))
	require.Equal(t, []int{3, 3}, []int{effects, distinct}, "every row recorded once, by the replacement")
}

// cursorSummary is the result of execution x's cursor step start.
func cursorSummary(t *testing.T, x map[string]any) map[string]any {
	t.Helper()
	steps, _ := x["steps"].(map[string]any)
	start, _ := steps["start"].(map[string]any)
	sum, _ := start["result"].(map[string]any)
	require.Equal(t, true, sum["drained"], "%v", start)
	return sum
}

// procEvent is an event as GET /v1/executions/{id}/events lists it.
type procEvent struct {
	Type    string         `json:"type"`
	Step    string         `json:"step"`
	Payload map[string]any `json:"payload"`
}

// events lists execution id's events (the first thousand).
func (p *procMesh) events(id string) ([]procEvent, error) {
	resp, err := p.do(http.MethodGet, "/v1/executions/"+id+"/events?pageSize=1000", nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("events: %s", resp.Status)
	}
	var page struct {
		Events []procEvent `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return nil, err
	}
	return page.Events, nil
}
