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

// cursorPlaybook drains cq.queue with a cursor loop of 8 claim slots, 25 rows a frame,
// each frame one body: a python gate (which, for the frame holding row 500 on its first
// attempt, writes <out>/killme with its worker's id and waits for <gate>), then a postgres
// insert of the frame's rows into cq.effect, whose primary key refuses a row recorded
// twice (the test's Postgres URL is in the workload: this mesh stores no credentials).
// The claim takes rows with FOR UPDATE SKIP LOCKED and answers the same rows when
// run again for the same command.
const cursorPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cursor_kill, path: tests/cursor_kill}
workload: {out: "", gate: "", pg: ""}
workflow:
  - step: start
    loop:
      cursor:
        kind: postgres
        connection_string: "{{ workload.pg }}"
        claim: |
          WITH mine AS (
            SELECT id FROM cq.queue WHERE claimed_by = $1
          ), fresh AS (
            UPDATE cq.queue SET claimed_by = $1
            WHERE id IN (SELECT id FROM cq.queue WHERE claimed_by IS NULL ORDER BY id LIMIT $2::int FOR UPDATE SKIP LOCKED)
              AND NOT EXISTS (SELECT 1 FROM mine)
            RETURNING id
          )
          SELECT id FROM mine UNION ALL SELECT id FROM fresh ORDER BY id
        params: ["{{ command_id }}", "{{ cursor.max_rows }}"]
      iterator: frame
      spec:
        mode: cursor
        max_in_flight: 8
        frame: {max_rows: 25, lease_seconds: 20, max_attempts: 3, process: frame}
    tool:
      - name: gate
        kind: python
        input: {rows: "{{ frame }}", attempt: "{{ iter._attempt }}", out: "{{ workload.out }}", gate: "{{ workload.gate }}"}
        code: |
          import json, os, time
          ids = [r["id"] for r in rows]
          me = os.environ.get("NOETL_WORKER_ID", "?")
          marker = os.path.join(out, "killme")
          if 500 in ids and int(attempt) == 1 and not os.path.exists(marker):
              with open(marker + ".tmp", "w") as f:
                  f.write(me)
              os.rename(marker + ".tmp", marker)
              deadline = time.time() + 120
              while not os.path.exists(gate) and time.time() < deadline:
                  time.sleep(0.05)
          result = {"ids": json.dumps(ids), "worker": me}
      - name: effect
        kind: postgres
        connection_string: "{{ workload.pg }}"
        command: INSERT INTO cq.effect (id, attempt, worker) SELECT j::int, $2::int, $3 FROM jsonb_array_elements_text($1::jsonb) AS j
        params: ["{{ gate.ids }}", "{{ iter._attempt }}", "{{ gate.worker }}"]
    next:
      arcs:
        - step: end
  - step: end
`

// TestCursorLoopDrainsAQueueThroughAKilledWorker drains a 1,000-row queue with 8 claim
// slots over three worker processes and kills (SIGKILL) the worker running the frame that
// holds row 500 while it runs: the frame's lease runs out, its body is issued again to a
// live worker, and every row is recorded exactly once (the effect table's primary key
// would fail a second record), row 500 by the second attempt on another worker.
func TestCursorLoopDrainsAQueueThroughAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	ctx := context.Background()
	pg := p.connect(t, `CREATE SCHEMA cq;
		CREATE TABLE cq.queue (id int PRIMARY KEY, claimed_by text);
		CREATE TABLE cq.effect (id int PRIMARY KEY REFERENCES cq.queue (id), attempt int NOT NULL, worker text NOT NULL);
		INSERT INTO cq.queue (id) SELECT generate_series(1, 1000);`)
	stopPid(t, p.pids["worker"], syscall.SIGTERM)
	workers := map[string]*service{}
	for _, id := range []string{"cursor-a", "cursor-b", "cursor-c"} {
		workers[id] = p.startService(t, "worker", "NOETL_WORKER_ID="+id)
	}
	p.register(t, cursorPlaybook)
	out := t.TempDir()
	gate := filepath.Join(out, "gate")
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) }) // frees the killed worker's orphaned tool
	id := p.startExecution(t, "tests/cursor_kill", map[string]any{"out": out, "gate": gate, "pg": p.pgURL})

	var victim string
	testkit.WaitFor(t, 2*time.Minute, func() error {
		b, err := os.ReadFile(filepath.Join(out, "killme"))
		if err != nil {
			return err
		}
		victim = string(b)
		return nil
	})
	require.Contains(t, workers, victim)
	require.NoError(t, workers[victim].cmd.Process.Kill(), "kill the worker mid-frame")
	<-workers[victim].done

	x := p.waitExecution(t, id)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)

	var effects, distinct, lo, hi, unclaimed int
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), min(id), max(id), (SELECT count(*) FROM cq.queue WHERE claimed_by IS NULL) FROM cq.effect`).
		Scan(&effects, &distinct, &lo, &hi, &unclaimed))
	require.Equal(t, []int{1000, 1000, 1, 1000, 0}, []int{effects, distinct, lo, hi, unclaimed}, "every row recorded exactly once, none left in the queue")
	var attempt int
	var by string
	require.NoError(t, pg.QueryRow(ctx, `SELECT attempt, worker FROM cq.effect WHERE id = 500`).Scan(&attempt, &by))
	require.GreaterOrEqual(t, attempt, 2, "the killed worker's frame was processed by a later attempt")
	require.NotEqual(t, victim, by, "by a live worker")

	steps, _ := x["steps"].(map[string]any)
	start, _ := steps["start"].(map[string]any)
	sum, _ := start["result"].(map[string]any)
	require.Equal(t, true, sum["drained"], "%v", start)
	require.EqualValues(t, 1000, sum["claimed"], "%v", sum)
	require.EqualValues(t, 1000, sum["processed"], "%v", sum)
	require.EqualValues(t, 0, sum["failed"], "%v", sum)
	require.EqualValues(t, 40, sum["frames"], "%v", sum)
	require.GreaterOrEqual(t, sum["reissued"], 1.0, "%v", sum)

	// The lease's timer fired for the frame, and the loop ended with a drain exit.
	resp, err := p.do(http.MethodGet, "/v1/executions/"+id+"/events?pageSize=1000", nil)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var page struct {
		Events []struct {
			Type    string         `json:"type"`
			Step    string         `json:"step"`
			Payload map[string]any `json:"payload"`
		} `json:"events"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	fired, drained := 0, false
	for _, ev := range page.Events {
		if ev.Type == "timer.fired" && strings.HasPrefix(fmt.Sprint(ev.Payload["timer_id"]), "lease:") {
			fired++
		}
		if ev.Type == "step.exit" && ev.Step == "start" {
			drained = ev.Payload["__cursor_drained"] == true
		}
	}
	require.Positive(t, fired, "the frame's lease ran out")
	require.True(t, drained, "the loop ends with a drain exit")
}
