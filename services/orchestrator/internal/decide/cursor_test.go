package decide

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"pgregory.net/rapid"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
)

const cursorBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: drain}
workflow:
  - step: start
    loop:
      cursor:
        kind: postgres
        auth: pg
        claim: SELECT id FROM q WHERE claimed_by IS NULL LIMIT {{ cursor.max_rows }}
      iterator: row
      spec:
        mode: cursor
        max_in_flight: 3
        frame: {max_rows: 4, lease_seconds: 30, max_attempts: 2, process: %s}
    tool: {kind: python, code: "result = row"}
    next:
      arcs:
        - step: end
          when: "{{ event.name == 'loop.done' }}"
  - step: end
`

// queue plays the worker for a cursor loop: claims take the next rows of a queue of ids
// (max_rows at a time), bodies record the ids they processed.
type queue struct {
	s       *sim
	next, n int
	// maxRows is the most rows a claim answers (4 unless set).
	maxRows   int
	processed map[int]int
	clock     time.Time
	// fail decides whether a body attempt fails (nil: none does).
	fail func(ids []int, attempt int32) bool
	// byRef makes claims answer by reference (rowCount: whether it says its row count).
	byRef, rowCount bool
	stored          map[string][]json.RawMessage
	// pad, when set, pads row id's JSON with that many bytes; maxBytes is the playbook's
	// frame.max_bytes, which no body's rows may exceed, and oversize the rows over it alone.
	pad      func(id int) int
	maxBytes int
	oversize map[int]bool
}

func newQueue(t *testing.T, process string, n int) *queue {
	return &queue{s: newSim(t, fmt.Sprintf(cursorBook, process), "{}"), n: n, processed: map[int]int{}, clock: time.Unix(1_700_000_000, 0), stored: map[string][]json.RawMessage{}}
}

// answer is a worker's outcome event for cmd, committed one second after the last.
func (q *queue) answer(cmd *eventv1.Event, typ string) *eventv1.Event {
	q.clock = q.clock.Add(time.Second)
	return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(),
		Iteration: cmd.GetIteration(), Attempt: cmd.GetAttempt(), CommitTime: timestamppb.New(q.clock)}
}

// run answers cmd: a claim with rows, a body by processing them.
func (q *queue) run(cmd *eventv1.Event) *eventv1.Event {
	t := q.s.t
	if cmd.GetStep() != "start" {
		ev := q.answer(cmd, domain.EventCommandCompleted)
		ev.ResultJson = []byte(`{}`)
		return ev
	}
	var p domain.IssuedPayload
	require.NoError(t, json.Unmarshal(cmd.GetPayloadJson(), &p))
	require.NotNil(t, p.Cursor, "a cursor command says where it belongs")
	if p.Cursor.Phase == domain.CursorPhaseClaim {
		require.Equal(t, "postgres", cmd.GetCommand().GetTools()[0].GetKind())
		var rows []json.RawMessage
		limit := q.maxRows
		if limit == 0 {
			limit = 4
		}
		for len(rows) < limit && q.next < q.n {
			q.next++
			row := fmt.Sprintf(`{"id":%d}`, q.next)
			if q.pad != nil && q.pad(q.next) > 0 {
				row = fmt.Sprintf(`{"id":%d,"pad":"%s"}`, q.next, strings.Repeat("x", q.pad(q.next)))
			}
			if q.maxBytes > 0 && len(row) > q.maxBytes {
				if q.oversize == nil {
					q.oversize = map[int]bool{}
				}
				q.oversize[q.next] = true
			}
			rows = append(rows, json.RawMessage(row))
		}
		ev := q.answer(cmd, domain.EventCommandCompleted)
		body, _ := json.Marshal(map[string]any{"rows": rows, "row_count": len(rows)})
		if q.byRef && len(rows) > 0 {
			uri := "noetl://results/t/x/" + cmd.GetCommandId()
			q.stored[uri] = rows
			ev.ResultRef = &eventv1.ResultRef{Uri: uri, ExtractedJson: []byte(`{"rows":{"_summary":"array"}}`)}
			if q.rowCount {
				ev.ResultRef.RowCount = int64(len(rows))
			}
		} else {
			ev.ResultJson = body
		}
		return ev
	}
	var sc domain.Scope
	require.NoError(t, json.Unmarshal(cmd.GetCommand().GetContextJson(), &sc))
	var ids []int
	switch v := sc.Iter["row"].(type) {
	case map[string]any:
		ids = append(ids, int(v["id"].(float64)))
	case []any:
		for _, r := range v {
			ids = append(ids, int(r.(map[string]any)["id"].(float64)))
		}
	}
	require.NotEmpty(t, ids, "the body sees its row(s): %v", sc.Iter)
	if q.maxBytes > 0 {
		size := 0
		for _, id := range ids {
			require.False(t, q.oversize[id], "row %d is over max_bytes alone and is never sent", id)
		}
		rows, ok := sc.Iter["row"].([]any)
		if !ok {
			rows = []any{sc.Iter["row"]}
		}
		for _, r := range rows {
			b, _ := json.Marshal(r)
			size += len(b)
		}
		require.LessOrEqual(t, size, q.maxBytes, "a body's rows are within max_bytes: %v", ids)
		if _, frame := sc.Iter["row"].([]any); frame {
			require.EqualValues(t, len(ids), sc.Iter["_rows"], "a sub-frame's _rows is its own")
		}
	}
	if q.fail != nil && q.fail(ids, cmd.GetAttempt()) {
		ev := q.answer(cmd, domain.EventCommandFailed)
		ev.Error = &eventv1.ErrorInfo{Code: "tool_error", Message: fmt.Sprintf("rows %v failed", ids)}
		return ev
	}
	for _, id := range ids {
		q.processed[id]++
	}
	ev := q.answer(cmd, domain.EventCommandCompleted)
	ev.ResultJson = []byte(`{"ok":true}`)
	return ev
}

// decide runs one decision with the stored claims as inputs and returns its events.
func (q *queue) decide() []*eventv1.Event {
	in := Inputs{ClaimRows: map[string][]json.RawMessage{}}
	for _, ref := range NeededClaimRows(q.s.st) {
		in.ClaimRows[ref.GetUri()] = q.stored[ref.GetUri()]
	}
	evs, err := DecideWith(q.s.c, q.s.st, in)
	require.NoError(q.s.t, err)
	again, err := DecideWith(q.s.c, q.s.st, in)
	require.NoError(q.s.t, err)
	require.Equal(q.s.t, ids(evs), ids(again), "deciding again on the same state yields the same events")
	q.s.apply(evs...)
	// Only the decision's own events changed the state, and those call for no decision
	// (domain.NeedsDecision): this one must have left nothing to decide.
	for _, ref := range NeededClaimRows(q.s.st) {
		in.ClaimRows[ref.GetUri()] = q.stored[ref.GetUri()]
	}
	next, err := DecideWith(q.s.c, q.s.st, in)
	require.NoError(q.s.t, err)
	require.Empty(q.s.t, ids(next), "a decision on the fold of the last one's events: %v", q.s.types())
	return evs
}

// drain decides and answers every command (in issue order, a decision after each answer),
// dropping the bodies drop says to (a worker that died), until the execution ends.
func (q *queue) drain(drop func(cmd *eventv1.Event) bool, pending ...*eventv1.Event) []*eventv1.Event {
	var dropped []*eventv1.Event
	for range 10_000 {
		for _, ev := range q.decide() {
			if sent(ev) {
				pending = append(pending, ev)
			}
		}
		if domain.IsTerminalStatus(q.s.st.GetStatus()) {
			return dropped
		}
		if len(pending) == 0 {
			// Nothing runs but leases: fire the timers the decisions scheduled.
			fired := q.fireTimers()
			require.True(q.s.t, fired, "the loop waits on nothing: %v", q.s.types())
			continue
		}
		cmd := pending[0]
		pending = pending[1:]
		if drop != nil && drop(cmd) {
			dropped = append(dropped, cmd)
			continue
		}
		q.s.apply(q.run(cmd))
	}
	q.s.t.Fatal("the cursor loop never drained")
	return nil
}

// fireTimers fires every scheduled timer not fired yet; it reports whether it fired any.
func (q *queue) fireTimers() bool {
	seen := map[string]bool{}
	for _, ev := range q.s.log {
		if ev.GetType() == domain.EventTimerFired {
			var p domain.TimerPayload
			require.NoError(q.s.t, json.Unmarshal(ev.GetPayloadJson(), &p))
			seen[p.TimerID] = true
		}
	}
	var fire []*eventv1.Event
	for _, ev := range q.s.log {
		if ev.GetType() != domain.EventTimerScheduled {
			continue
		}
		var p domain.TimerPayload
		require.NoError(q.s.t, json.Unmarshal(ev.GetPayloadJson(), &p))
		if seen[p.TimerID] {
			continue
		}
		seen[p.TimerID] = true
		q.clock = maxTime(q.clock, p.DueAt)
		fire = append(fire, &eventv1.Event{EventId: domain.EventID(p.TimerID, domain.EventTimerFired), ExecutionId: "x", Type: domain.EventTimerFired, Step: ev.GetStep(),
			PayloadJson: ev.GetPayloadJson(), CommitTime: timestamppb.New(q.clock)})
	}
	q.s.apply(fire...)
	return len(fire) > 0
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (q *queue) summary() map[string]any {
	var m map[string]any
	require.NoError(q.s.t, json.Unmarshal(q.s.st.GetSteps()["start"].GetResultJson(), &m))
	return m
}

func TestCursorLoopClaimsRunsBodiesAndDrains(t *testing.T) {
	for _, process := range []string{"row", "frame"} {
		t.Run(process, func(t *testing.T) {
			q := newQueue(t, process, 23)
			first := q.decide()
			require.Equal(t, domain.EventStepEnter, first[0].GetType())
			claims := commandsOf(first)
			require.Len(t, claims, 3, "one claim per slot (max_in_flight)")
			var sc domain.Scope
			require.NoError(t, json.Unmarshal(claims[1].GetCommand().GetContextJson(), &sc))
			require.EqualValues(t, 4, sc.Iter["cursor"].(map[string]any)["max_rows"], "the claim reads {{ cursor.max_rows }}")
			require.EqualValues(t, 1, sc.Iter["cursor"].(map[string]any)["slot"])
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(claims[0].GetCommand().GetTools()[0].GetConfigJson(), &cfg))
			require.Equal(t, "pg", cfg["auth"])
			require.Contains(t, cfg["command"], "LIMIT {{ cursor.max_rows }}")
			require.Equal(t, domain.CursorClaimID("x", "start", 1, 0, 1), claims[0].GetCommandId())

			q.drain(nil, claims...)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
			require.Len(t, q.processed, 23)
			for id, n := range q.processed {
				require.Equal(t, 1, n, "row %d processed once", id)
			}
			sum := q.summary()
			require.Equal(t, true, sum["drained"])
			require.EqualValues(t, 23, sum["claimed"])
			require.EqualValues(t, 23, sum["processed"])
			require.EqualValues(t, 0, sum["failed"])
			require.EqualValues(t, 6, sum["frames"], "23 rows, 4 a frame")
			require.EqualValues(t, 6+3, sum["claims"], "each slot's last claim returned no rows")
			want := 23
			if process == "frame" {
				want = 6
			}
			require.EqualValues(t, want, sum["attempts"])
			// The drain exit routes the loop as loop.done.
			var exit domain.ExitPayload
			for _, ev := range q.s.log {
				if ev.GetType() == domain.EventStepExit && ev.GetStep() == "start" {
					require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &exit))
				}
			}
			require.True(t, exit.CursorDrained, "the step ends with a drain exit")
			require.Equal(t, []string{"end"}, exit.Fired)
		})
	}
}

func TestCursorClaimByReferenceCountsAsRows(t *testing.T) {
	for _, rowCount := range []bool{true, false} {
		t.Run(fmt.Sprintf("row_count=%v", rowCount), func(t *testing.T) {
			q := newQueue(t, "row", 10)
			q.byRef, q.rowCount = true, rowCount
			claims := commandsOf(q.decide())
			q.s.apply(q.run(claims[0]))
			s := q.s.st.GetSteps()["start"]
			require.False(t, s.GetCursor().GetSlots()[0].GetDrained(), "a claim by reference is not an empty claim")
			refs := NeededClaimRows(q.s.st)
			require.Len(t, refs, 1)
			_, err := DecideWith(q.s.c, q.s.st, Inputs{})
			require.ErrorIs(t, err, ErrClaimRowsMissing, "the decision needs the rows loaded")

			q.drain(nil, claims[1:]...)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
			require.Len(t, q.processed, 10)
			require.EqualValues(t, 10, q.summary()["processed"])
			require.EqualValues(t, 10, q.summary()["claimed"])
		})
	}
}

func TestCursorRowIsAttemptedAtMostMaxAttempts(t *testing.T) {
	q := newQueue(t, "row", 9)
	attempts := map[int]int{}
	q.fail = func(ids []int, attempt int32) bool {
		attempts[ids[0]]++
		return ids[0] == 5 || (ids[0] == 7 && attempt == 1)
	}
	q.drain(nil)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
	require.Equal(t, 2, attempts[5], "max_attempts: 2")
	require.Equal(t, 2, attempts[7], "a failed attempt is issued again")
	require.Equal(t, 1, attempts[1])
	sum := q.summary()
	require.EqualValues(t, 8, sum["processed"])
	require.EqualValues(t, 1, sum["failed"])
	require.EqualValues(t, 2, sum["reissued"])
	require.Contains(t, sum["last_error"], "rows [5] failed")
}

func TestCursorFrameIsIssuedAgainAfterItsLease(t *testing.T) {
	q := newQueue(t, "frame", 12)
	var killed *eventv1.Event
	// The worker running the second frame's body dies: no outcome ever comes.
	q.drain(func(cmd *eventv1.Event) bool {
		var p domain.IssuedPayload
		_ = json.Unmarshal(cmd.GetPayloadJson(), &p)
		if killed == nil && p.Cursor != nil && p.Cursor.Phase == domain.CursorPhaseBody && p.Cursor.Slot == 1 {
			killed = cmd
			return true
		}
		return false
	})
	require.NotNil(t, killed)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
	require.Len(t, q.processed, 12, "the dead worker's frame was processed by its next attempt")
	sum := q.summary()
	require.EqualValues(t, 1, sum["reissued"])
	require.EqualValues(t, 12, sum["processed"])
	var claimed, reissued, lease *eventv1.Event
	for _, ev := range q.s.log {
		switch {
		case ev.GetType() == domain.EventCommandCompleted && ev.GetCommandId() == domain.CursorClaimID("x", "start", 1, 1, 1):
			claimed = ev
		case ev.GetType() == domain.EventTimerScheduled && ev.GetEventId() == domain.EventID(killed.GetCommandId(), domain.EventTimerScheduled):
			lease = ev
		case ev.GetType() == domain.EventCommandIssued && ev.GetCommandId() == domain.CursorBodyID("x", "start", 1, 1, 1, 0, 2):
			reissued = ev
		}
	}
	require.NotNil(t, reissued, "attempt 2 of the frame")
	var p domain.TimerPayload
	require.NoError(t, json.Unmarshal(lease.GetPayloadJson(), &p))
	require.Equal(t, claimed.GetCommitTime().AsTime().Add(30*time.Second), p.DueAt.UTC(), "the lease runs from the claim's commit")
}

func TestCursorClaimFailureFailsTheStep(t *testing.T) {
	q := newQueue(t, "row", 3)
	claims := commandsOf(q.decide())
	ev := q.answer(claims[0], domain.EventCommandFailed)
	ev.Error = &eventv1.ErrorInfo{Code: "tool_error", Message: `relation "q" does not exist`}
	q.s.apply(ev)
	q.s.apply(q.run(claims[1])) // a late claim of the failed step changes nothing
	q.decide()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, q.s.st.GetStatus())
	require.Contains(t, q.s.st.GetError().GetMessage(), `the cursor's claim failed: relation "q" does not exist`)
}

func TestCursorClaimOverTheFrameLimitFailsTheStep(t *testing.T) {
	q := newQueue(t, "row", 3)
	claims := commandsOf(q.decide())
	ev := q.answer(claims[0], domain.EventCommandCompleted)
	ev.ResultJson = []byte(fmt.Sprintf(`{"rows":[%s{"id":0}]}`, strings.Repeat(`{"id":1},`, domain.CursorMaxFrameRows)))
	q.s.apply(ev)
	q.decide()
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, q.s.st.GetStatus())
	require.Contains(t, q.s.st.GetError().GetMessage(), "the cursor's claim returned 10001 rows, over the most a frame holds (10000)")
}

func TestCursorIndexesOfSlotsNeverOverlap(t *testing.T) {
	require.Equal(t, playbook.CursorMaxRows, domain.CursorMaxFrameRows)
	last := domain.CursorIndex(0, playbook.CursorMaxRows-1)
	require.Less(t, last, domain.CursorIndex(1, -1), "a frame's last row stays within its slot")
	require.Positive(t, domain.CursorIndex(playbook.CursorMaxSlots-1, playbook.CursorMaxRows-1))
}

func TestCursorRowConcurrencyCapsAFramesBodiesInFlight(t *testing.T) {
	q := newQueue(t, "row, row_concurrency: 2", 11)
	// Count, per frame (slot and claim), the bodies issued and not answered yet.
	inFlight := map[string]int{}
	most := 0
	key := func(cmd *eventv1.Event) string {
		var p domain.IssuedPayload
		if cmd.GetStep() != "start" {
			return ""
		}
		require.NoError(t, json.Unmarshal(cmd.GetPayloadJson(), &p))
		if p.Cursor == nil || p.Cursor.Phase != domain.CursorPhaseBody {
			return ""
		}
		return fmt.Sprint(p.Cursor.Slot, "/", p.Cursor.Claim)
	}
	var pending []*eventv1.Event
	for range 1000 {
		for _, ev := range q.decide() {
			if sent(ev) {
				pending = append(pending, ev)
				if k := key(ev); k != "" {
					inFlight[k]++
					most = max(most, inFlight[k])
				}
			}
		}
		if domain.IsTerminalStatus(q.s.st.GetStatus()) || len(pending) == 0 {
			break
		}
		cmd := pending[0]
		pending = pending[1:]
		if k := key(cmd); k != "" {
			inFlight[k]--
		}
		q.s.apply(q.run(cmd))
	}
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
	require.Equal(t, 2, most, "at most row_concurrency bodies of one frame at once")
	require.Len(t, q.processed, 11)
	require.EqualValues(t, 11, q.summary()["processed"])
}

const cursorPropBook = `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: drain}
workflow:
  - step: start
    loop:
      cursor: {claim: SELECT 1}
      iterator: row
      spec:
        max_in_flight: %d
        frame: {max_rows: %d, lease_seconds: 10, max_attempts: %d, process: %s, row_concurrency: %d, max_bytes: %d}
    tool: {kind: noop}
`

// TestCursorLoopProperties drains random queues with random slots, frames and attempts,
// answering commands in a random order, failing or dropping (a worker that died) random
// body attempts, with rows of random sizes under a random frame.max_bytes (0: none), some
// claims answered by reference, and checks: the loop completes with every row claimed once
// and counted processed or failed, each row's effect at most once, no body's rows over
// max_bytes and no row over it alone sent (it counts failed), decisions are deterministic
// and leave nothing to decide on their own fold, and folding the whole log from zero
// yields the incremental state.
func TestCursorLoopProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 30).Draw(rt, "rows")
		maxRows := rapid.IntRange(1, 5).Draw(rt, "max_rows")
		maxBytes := rapid.SampledFrom([]int{0, 0, 20, 30, 45, 60}).Draw(rt, "max_bytes")
		src := fmt.Sprintf(cursorPropBook, rapid.IntRange(1, 4).Draw(rt, "slots"), maxRows, rapid.IntRange(1, 3).Draw(rt, "max_attempts"),
			rapid.SampledFrom([]string{"row", "frame"}).Draw(rt, "process"), rapid.IntRange(0, 3).Draw(rt, "row_concurrency"), maxBytes)
		q := &queue{s: newSim(t, src, "{}"), n: n, maxRows: maxRows, processed: map[int]int{}, clock: time.Unix(1_700_000_000, 0), stored: map[string][]json.RawMessage{}, maxBytes: maxBytes}
		q.byRef = rapid.Bool().Draw(rt, "by_reference")
		q.rowCount = rapid.Bool().Draw(rt, "row_count")
		q.fail = func([]int, int32) bool { return rapid.IntRange(0, 4).Draw(rt, "fail") == 0 }
		pads := map[int]int{}
		q.pad = func(id int) int {
			if _, ok := pads[id]; !ok {
				pads[id] = rapid.SampledFrom([]int{0, 0, 5, 12, 30, 50}).Draw(rt, "pad")
			}
			return pads[id]
		}
		var pending []*eventv1.Event
		for step := 0; ; step++ {
			if step > 5000 {
				rt.Fatalf("the loop never drained: %v", q.s.types())
			}
			for _, ev := range q.decide() {
				if sent(ev) {
					pending = append(pending, ev)
				}
			}
			if domain.IsTerminalStatus(q.s.st.GetStatus()) {
				break
			}
			if len(pending) == 0 {
				if !q.fireTimers() {
					rt.Fatalf("the loop waits on nothing: %v", q.s.types())
				}
				continue
			}
			i := rapid.IntRange(0, len(pending)-1).Draw(rt, "next")
			cmd := pending[i]
			pending = append(pending[:i:i], pending[i+1:]...)
			var p domain.IssuedPayload
			if err := json.Unmarshal(cmd.GetPayloadJson(), &p); err != nil {
				rt.Fatalf("payload: %v", err)
			}
			if p.Cursor.Phase == domain.CursorPhaseBody && rapid.IntRange(0, 5).Draw(rt, "drop") == 0 {
				continue // its worker died: no outcome ever comes
			}
			q.s.apply(q.run(cmd))
		}
		if got := q.s.st.GetStatus(); got != eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED {
			rt.Fatalf("status %v: %v", got, q.s.st.GetError())
		}
		sum := q.summary()
		for id, times := range q.processed {
			if times != 1 {
				rt.Fatalf("row %d processed %d times", id, times)
			}
		}
		if sum["claimed"] != float64(n) || sum["processed"] != float64(len(q.processed)) || sum["processed"].(float64)+sum["failed"].(float64) != float64(n) {
			rt.Fatalf("summary %v for %d rows, %d processed", sum, n, len(q.processed))
		}
		if sum["failed"].(float64) < float64(len(q.oversize)) {
			rt.Fatalf("summary %v: %d rows over max_bytes alone", sum, len(q.oversize))
		}
		again := domain.NewState("x")
		for _, ev := range q.s.log {
			if err := domain.Apply(again, ev); err != nil {
				rt.Fatalf("refold: %v", err)
			}
		}
		if !proto.Equal(again, q.s.st) {
			rt.Fatalf("folding the log from zero differs from the incremental state")
		}
	})
}
