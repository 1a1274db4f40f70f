package playbook

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func cursorStep(loop string) []byte {
	return doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    loop:\n" + loop)
}

func TestParseCursorLoop(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, cursorStep(`      cursor:
        kind: postgres
        auth: pg_local
        claim: "UPDATE q SET claimed = true WHERE id IN (SELECT id FROM q WHERE NOT claimed LIMIT {{ cursor.max_rows }} FOR UPDATE SKIP LOCKED) RETURNING id"
        options: {statement_timeout_ms: 5000}
      iterator: row
      spec:
        mode: cursor
        max_in_flight: 8
        frame: {max_rows: 25, lease_seconds: 20, heartbeat_seconds: 5, max_attempts: 4, process: frame, row_concurrency: 3}
`))
	l := pb.Step("start").Loop
	require.Equal(t, LoopCursor, l.Mode)
	require.Equal(t, 8, l.MaxInFlight)
	require.Equal(t, "row", l.Iterator)
	c := l.Cursor
	require.NotNil(t, c)
	require.Equal(t, "postgres", c.Kind)
	require.Equal(t, Frame{MaxRows: 25, LeaseSeconds: 20, HeartbeatSeconds: 5, MaxAttempts: 4, Process: ProcessFrame, RowConcurrency: 3}, c.Frame)
	require.Equal(t, "pg_local", c.Config["auth"])
	require.Equal(t, c.Claim, c.Config["command"], "the claim runs as the postgres tool's command")
	require.EqualValues(t, 5000, c.Config["statement_timeout_ms"], "options configure the claim's tool")
	require.NotContains(t, c.Config, "options")
	require.NotContains(t, c.Config, "claim")

	// mode: cursor may be left out, and frame defaults apply.
	pb = mustParse(t, cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n"))
	l = pb.Step("start").Loop
	require.Equal(t, LoopCursor, l.Mode)
	require.Equal(t, Frame{MaxRows: CursorDefaultMaxRows, LeaseSeconds: CursorDefaultLeaseSeconds, MaxAttempts: CursorDefaultMaxAttempts, Process: ProcessRow}, l.Cursor.Frame)
}

func TestParseCursorLoopErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, loop, field, inMsg string
	}{
		{"in and cursor", "      in: [1, 2]\n      cursor: {claim: SELECT 1}\n      iterator: row\n", "loop.in", "in and cursor are mutually exclusive"},
		{"mode cursor without cursor", "      in: [1]\n      iterator: row\n      spec: {mode: cursor}\n", "loop.spec.mode", "mode cursor needs a loop.cursor"},
		{"cursor in parallel mode", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {mode: parallel}\n", "loop.spec.mode", `runs in mode cursor, not "parallel"`},
		{"cursor without claim", "      cursor: {kind: postgres, auth: pg}\n      iterator: row\n", "loop.cursor.claim", "a cursor needs a claim"},
		{"empty claim", "      cursor: {claim: \"\"}\n      iterator: row\n", "loop.cursor.claim", "the claim SQL is empty"},
		{"unknown cursor kind", "      cursor: {kind: mysql, claim: SELECT 1}\n      iterator: row\n", "loop.cursor.kind", `unknown cursor kind "mysql"`},
		{"cursor not a mapping", "      cursor: SELECT 1\n      iterator: row\n", "loop.cursor", "must be a mapping"},
		{"bad process", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {process: batch}}\n", "loop.spec.frame.process", `unknown process "batch"`},
		{"zero max_attempts", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {max_attempts: 0}}\n", "loop.spec.frame.max_attempts", "at least 1"},
		{"zero max_rows", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {max_rows: 0}}\n", "loop.spec.frame.max_rows", "between 1 and"},
		{"negative lease", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {lease_seconds: -3}}\n", "loop.spec.frame.lease_seconds", "non-negative integer"},
		{"unknown frame field", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {rows: 3}}\n", "loop.spec.frame.rows", `unknown frame field "rows"`},
		{"too many slots", "      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {max_in_flight: 1000}\n", "loop.spec.max_in_flight", "at most 256 claim slots"},
		{"cursor without iterator", "      cursor: {claim: SELECT 1}\n", "loop.iterator", "needs an iterator"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pb, err := Parse(cursorStep(tc.loop))
			require.Nil(t, pb)
			e := firstError(t, err)
			require.Equal(t, "start", e.Step, "error: %v", err)
			require.Equal(t, tc.field, e.Field, "error: %v", err)
			require.Contains(t, e.Msg, tc.inMsg)
			require.Contains(t, err.Error(), `step "start"`)
		})
	}
}

func TestParseCursorFrameBounds(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {lease_seconds: 30, heartbeat_seconds: 5, max_seconds: 120, max_bytes: 65536}}\n"))
	f := pb.Step("start").Loop.Cursor.Frame
	require.Equal(t, 5, f.HeartbeatSeconds)
	require.Equal(t, 120, f.MaxSeconds)
	require.Equal(t, 65536, f.MaxBytes)
	require.Empty(t, pb.Warnings, "the three are enforced: no warning")

	// The default lease (300 s) bounds a heartbeat too.
	pb = mustParse(t, cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {heartbeat_seconds: 299}}\n"))
	require.Equal(t, 299, pb.Step("start").Loop.Cursor.Frame.HeartbeatSeconds)

	for _, frame := range []string{"{lease_seconds: 10, heartbeat_seconds: 10}", "{heartbeat_seconds: 300}", "{heartbeat_seconds: 60, lease_seconds: 30}"} {
		_, err := Parse(cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: " + frame + "}\n"))
		e := firstError(t, err)
		require.Equal(t, "loop.spec.frame.heartbeat_seconds", e.Field, frame)
		require.Contains(t, e.Msg, "must be under lease_seconds", frame)
	}
	for _, key := range []string{"max_seconds", "max_bytes", "heartbeat_seconds"} {
		_, err := Parse(cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {" + key + ": -1}}\n"))
		e := firstError(t, err)
		require.Equal(t, "loop.spec.frame."+key, e.Field)
		require.Contains(t, e.Msg, "non-negative integer")
	}
}

func TestParseCursorWarnsAboutWhatItDoesNotEnforce(t *testing.T) {
	t.Parallel()
	msgs := func(pb *Playbook) string {
		var out []string
		for _, w := range pb.Warnings {
			out = append(out, w.Msg)
		}
		return strings.Join(out, "\n")
	}
	pb := mustParse(t, cursorStep("      in: [1, 2]\n      iterator: row\n      spec: {frame: {max_rows: 5}}\n"))
	require.Contains(t, msgs(pb), `field "loop.spec.frame" applies to cursor loops only and is ignored`)
	pb = mustParse(t, cursorStep("      cursor: {claim: SELECT 1}\n      iterator: row\n      spec: {frame: {max_rows: 5, lease_seconds: 9}}\n"))
	require.NotContains(t, msgs(pb), "loop.spec.frame")

	// The claim's tool keys are checked as a postgres tool's are.
	pb = mustParse(t, cursorStep("      cursor: {claim: SELECT 1, auth: pg, qurey: x, options: {statment_timeout: 5}}\n      iterator: row\n"))
	require.Contains(t, msgs(pb), `loop.cursor key "qurey" is not read by the "postgres" claim; it is ignored`)
	require.Contains(t, msgs(pb), `loop.cursor.options key "statment_timeout" is not read by the "postgres" claim; it is ignored`)
	require.NotContains(t, msgs(pb), `"auth"`)
}
