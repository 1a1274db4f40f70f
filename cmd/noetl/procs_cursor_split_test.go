package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// cursorSplitPlaybook drains sp.queue with two claim slots, 10 rows a frame processed
// whole, and frame.max_bytes 300: rows of about 120 bytes, so each claimed frame (about
// 1,200 bytes) is cut into sub-frames of two rows. A body records its rows in sp.effect,
// whose primary key refuses a row recorded twice, with its sub-frame's index and size.
const cursorSplitPlaybook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cursor_split, path: tests/cursor_split}
workload: {pg: ""}
workflow:
  - step: start
    loop:
      cursor:
        kind: postgres
        connection_string: "{{ workload.pg }}"
        claim: |
          WITH mine AS (
            SELECT id, pad FROM sp.queue WHERE claimed_by = $1
          ), fresh AS (
            UPDATE sp.queue SET claimed_by = $1
            WHERE id IN (SELECT id FROM sp.queue WHERE claimed_by IS NULL ORDER BY id LIMIT $2::int FOR UPDATE SKIP LOCKED)
              AND NOT EXISTS (SELECT 1 FROM mine)
            RETURNING id, pad
          )
          SELECT id, pad FROM mine UNION ALL SELECT id, pad FROM fresh ORDER BY id
        params: ["{{ command_id }}", "{{ cursor.max_rows }}"]
      iterator: frame
      spec:
        mode: cursor
        max_in_flight: 2
        frame: {max_rows: 10, max_bytes: 300, process: frame}
    tool:
      - name: ids
        kind: python
        input: {rows: "{{ frame }}"}
        code: |
          import json
          result = {"ids": json.dumps([r["id"] for r in rows])}
      - name: effect
        kind: postgres
        connection_string: "{{ workload.pg }}"
        command: INSERT INTO sp.effect (id, part, rows) SELECT j::int, $2::int, $3::int FROM jsonb_array_elements_text($1::jsonb) AS j
        params: ["{{ ids.ids }}", "{{ iter._index }}", "{{ iter._rows }}"]
    next:
      arcs:
        - step: end
  - step: end
`

// TestCursorFrameOverMaxBytesIsSplit drains a 30-row queue whose claims return frames of
// 10 rows, each over frame.max_bytes: every frame is processed as sub-frames of two rows
// within the bound, every row exactly once, except row 17, over max_bytes by itself,
// which is never sent and counts as failed, naming the setting.
func TestCursorFrameOverMaxBytesIsSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the six services as processes (skipped with -short)")
	}
	p := startProcesses(t)
	ctx := context.Background()
	pg := p.connect(t, `CREATE SCHEMA sp;
		CREATE TABLE sp.queue (id int PRIMARY KEY, pad text NOT NULL, claimed_by text);
		CREATE TABLE sp.effect (id int PRIMARY KEY REFERENCES sp.queue (id), part int NOT NULL, rows int NOT NULL);
		INSERT INTO sp.queue (id, pad) SELECT i, repeat('x', CASE WHEN i = 17 THEN 400 ELSE 100 END) FROM generate_series(1, 30) AS i;`)
	p.register(t, cursorSplitPlaybook)
	id := p.startExecution(t, "tests/cursor_split", map[string]any{"pg": p.pgURL})
	x := p.waitExecution(t, id)
	require.Equal(t, "EXECUTION_STATUS_COMPLETED", x["status"], "%v", x)
	sum := cursorSummary(t, x)
	require.EqualValues(t, 30, sum["claimed"], "%v", sum)
	require.EqualValues(t, 3, sum["frames"], "the claims' frames, however cut: %v", sum)
	require.EqualValues(t, 29, sum["processed"], "%v", sum)
	require.EqualValues(t, 1, sum["failed"], "%v", sum)
	require.EqualValues(t, 0, sum["reissued"], "%v", sum)
	require.Contains(t, sum["last_error"], "over loop.spec.frame.max_bytes (300)", "%v", sum)

	var effects, distinct, most, parts int
	var has17 bool
	require.NoError(t, pg.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), max(rows), count(DISTINCT part), bool_or(id = 17) FROM sp.effect`).
		Scan(&effects, &distinct, &most, &parts, &has17))
	require.Equal(t, []int{29, 29}, []int{effects, distinct}, "every row but 17 recorded exactly once")
	require.False(t, has17, "the row over max_bytes alone was never sent")
	require.Equal(t, 2, most, "a sub-frame holds two rows (about 240 bytes of 300)")
	require.Greater(t, parts, 1, "frames were cut into several bodies")
	require.EqualValues(t, 16, sum["attempts"], "5 sub-frames of 2 rows for rows 1-10 and 21-30; [11 12] [13 14] [15 16] [17] (refused) [18 19] [20]: %v", sum)
}
