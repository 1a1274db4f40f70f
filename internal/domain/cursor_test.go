package domain

import (
	"testing"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
)

func TestClaimRowsCountsRowsInlineAndByReference(t *testing.T) {
	cases := []struct {
		name   string
		result string
		ref    *eventv1.ResultRef
		n      int
		err    string
	}{
		{name: "postgres result", result: `{"rows":[{"id":1},{"id":2}],"row_count":2,"columns":["id"]}`, n: 2},
		{name: "no rows", result: `{"rows":[],"row_count":0}`, n: 0},
		{name: "null rows", result: `{"rows":null}`, n: 0},
		{name: "a list", result: `[{"id":1}]`, n: 1},
		{name: "null", result: `null`, n: 0},
		{name: "an object without rows", result: `{"id":1}`, err: "without a rows list (keys: id)"},
		{name: "a number", result: `3`, err: "not rows"},
		{name: "by reference with a row count", ref: &eventv1.ResultRef{Uri: "u", RowCount: 40}, n: 40},
		{name: "by reference, count in the summary", ref: &eventv1.ResultRef{Uri: "u", ExtractedJson: []byte(`{"row_count":7,"rows":{"_summary":"array"}}`)}, n: 7},
		// A claim by reference is never read as empty: its rows are loaded to count them.
		{name: "by reference without a count", ref: &eventv1.ResultRef{Uri: "u", ExtractedJson: []byte(`{"rows":{"_summary":"array"}}`)}, n: -1},
		{name: "by reference, summary says zero", ref: &eventv1.ResultRef{Uri: "u", ExtractedJson: []byte(`{"row_count":0}`)}, n: -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, rows, ref, err := ClaimRows([]byte(tc.result), tc.ref)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.n, n)
			if tc.ref != nil {
				require.Equal(t, tc.ref, ref)
				require.Nil(t, rows)
			} else {
				require.Len(t, rows, n)
			}
		})
	}
}

func TestCursorIndexAndLeaseTimerRoundTrip(t *testing.T) {
	for _, slot := range []int32{0, 1, 255} {
		for _, unit := range []int32{-1, 0, 9_999} {
			s, u := cursorUnpack(CursorIndex(slot, unit))
			require.Equal(t, [2]int32{slot, unit}, [2]int32{s, u})
			body := CursorBodyID("x", "step", 1, slot, 3, max(unit, 0), 2)
			s, u, k, id, ok := parseLeaseTimer(CursorLeaseTimerID(slot, unit, body))
			require.True(t, ok)
			require.Equal(t, [3]int32{slot, unit, 0}, [3]int32{s, u, k})
			require.Equal(t, body, id)
			s, u, k, id, ok = parseLeaseTimer(CursorLeaseRenewalID(slot, unit, 7, body))
			require.True(t, ok)
			require.Equal(t, [3]int32{slot, unit, 7}, [3]int32{s, u, k}, "a renewal's timer names its renewal")
			require.Equal(t, body, id)
		}
	}
	for _, bad := range []string{"t123", "lease.0:1:2:c", "lease.x:1:2:c", "lease.3", "leases:1:2:c", "lease:1:c"} {
		_, _, _, _, ok := parseLeaseTimer(bad)
		require.False(t, ok, "%q is not a lease timer", bad)
	}
	require.NotEqual(t, HeartbeatEventID("c1", "", 1), EventID("c1", EventCommandStarted))
	require.True(t, NeedsDecision(EventCommandCompleted))
	require.False(t, NeedsDecision(EventCommandHeartbeat), "a heartbeat moves a lease's end, read when its timer fires")
	require.False(t, NeedsDecision(EventTimerScheduled))
	require.NotEqual(t, CursorClaimID("x", "s", 1, 0, 1), CursorBodyID("x", "s", 1, 0, 1, 0, 1))
	require.NotEqual(t, CursorClaimID("x", "s", 1, 0, 1), CommandID("x", "s", 1, 0, 1))
}

// A frame's cut (CursorIssue.Parts) applies once, to a frame processed whole that no body
// was issued for, and only when it cuts the frame's rows from 0 in increasing order; each
// sub-frame then counts its own rows.
func TestCursorSplitCutsAFrameOnce(t *testing.T) {
	frame := func() *sbv1.CursorFrame {
		return &sbv1.CursorFrame{Rows: 5, Units: []*sbv1.CursorUnit{{}}}
	}
	whole := &sbv1.CursorState{}
	for _, tc := range []struct {
		name  string
		c     *sbv1.CursorState
		f     *sbv1.CursorFrame
		parts []int32
		want  [][2]int32 // first row, rows
	}{
		{"cut", whole, frame(), []int32{0, 2, 4}, [][2]int32{{0, 2}, {2, 2}, {4, 1}}},
		{"not from 0", whole, frame(), []int32{1, 3}, [][2]int32{{0, 0}}},
		{"past the rows", whole, frame(), []int32{0, 5}, [][2]int32{{0, 0}}},
		{"not increasing", whole, frame(), []int32{0, 3, 3}, [][2]int32{{0, 0}}},
		{"per row", &sbv1.CursorState{PerRow: true}, frame(), []int32{0, 2}, [][2]int32{{0, 0}}},
		{"issued already", whole, &sbv1.CursorFrame{Rows: 5, Units: []*sbv1.CursorUnit{{Attempt: 1}}}, []int32{0, 2}, [][2]int32{{0, 0}}},
		{"cut already", whole, &sbv1.CursorFrame{Rows: 5, Units: []*sbv1.CursorUnit{{Rows: 3}, {FirstRow: 3, Rows: 2}}}, []int32{0, 1}, [][2]int32{{0, 3}, {3, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cursorSplit(tc.c, tc.f, tc.parts)
			var got [][2]int32
			for _, u := range tc.f.GetUnits() {
				got = append(got, [2]int32{u.GetFirstRow(), u.GetRows()})
			}
			require.Equal(t, tc.want, got)
			var rows int64
			for _, u := range tc.f.GetUnits() {
				rows += unitRows(tc.c, tc.f, u)
			}
			if !tc.c.GetPerRow() {
				require.EqualValues(t, 5, rows, "the units count the frame's rows once")
			}
		})
	}
}
