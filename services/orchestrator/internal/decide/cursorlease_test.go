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
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// heartbeat is beat number beat of body cmd, committed at the queue's clock plus after.
func (q *queue) heartbeat(cmd *eventv1.Event, beat int32, after time.Duration) *eventv1.Event {
	q.clock = q.clock.Add(after)
	payload, _ := json.Marshal(domain.HeartbeatPayload{Beat: beat})
	return &eventv1.Event{EventId: domain.HeartbeatEventID(cmd.GetCommandId(), "", beat), ExecutionId: "x", Type: domain.EventCommandHeartbeat, Step: cmd.GetStep(),
		CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration(), Attempt: cmd.GetAttempt(), PayloadJson: payload, CommitTime: timestamppb.New(q.clock)}
}

// fire is timer.fired for the timer ev scheduled, committed at its due time.
func (q *queue) fire(ev *eventv1.Event) *eventv1.Event {
	var p domain.TimerPayload
	require.NoError(q.s.t, json.Unmarshal(ev.GetPayloadJson(), &p))
	q.clock = maxTime(q.clock, p.DueAt)
	return &eventv1.Event{EventId: domain.EventID(p.TimerID, domain.EventTimerFired), ExecutionId: "x", Type: domain.EventTimerFired, Step: ev.GetStep(),
		PayloadJson: ev.GetPayloadJson(), CommitTime: timestamppb.New(q.clock)}
}

func timersOf(evs []*eventv1.Event) []*eventv1.Event {
	var out []*eventv1.Event
	for _, ev := range evs {
		if ev.GetType() == domain.EventTimerScheduled {
			out = append(out, ev)
		}
	}
	return out
}

func dueOf(t *testing.T, ev *eventv1.Event) (string, time.Time) {
	var p domain.TimerPayload
	require.NoError(t, json.Unmarshal(ev.GetPayloadJson(), &p))
	return p.TimerID, p.DueAt.UTC()
}

// startFrame runs a heartbeat queue of 4 rows (one frame, processed whole) up to its body's
// first attempt: it returns the body, its lease timer and the claim's commit time.
func startFrame(t *testing.T, frame string) (*queue, *eventv1.Event, *eventv1.Event, time.Time) {
	q := newQueue(t, frame, 4)
	claims := commandsOf(q.decide())
	q.s.apply(q.run(claims[0])) // slot 0 takes the 4 rows, the others are drained
	claimed := q.clock
	for _, c := range claims[1:] {
		q.s.apply(q.run(c))
	}
	evs := q.decide()
	bodies := commandsOf(evs)
	require.Len(t, bodies, 1)
	leases := timersOf(evs)
	require.Len(t, leases, 1)
	return q, bodies[0], leases[0], claimed
}

func TestCursorHeartbeatsRenewTheLease(t *testing.T) {
	q, body, lease, claimed := startFrame(t, "frame, heartbeat_seconds: 10")
	require.Equal(t, 10*time.Second, body.GetCommand().GetHeartbeat().AsDuration(), "the body's worker heartbeats every heartbeat_seconds")
	_, due := dueOf(t, lease)
	require.Equal(t, claimed.Add(30*time.Second).UTC(), due, "the first lease runs from the claim")

	// Heartbeats are folded and call for no decision of their own.
	require.Equal(t, claimed.Add(2*time.Second), q.clock, "the other slots' claims answered after")
	q.s.apply(q.heartbeat(body, 1, 8*time.Second), q.heartbeat(body, 2, 10*time.Second), q.heartbeat(body, 3, 9*time.Second))
	require.False(t, domain.NeedsDecision(domain.EventCommandHeartbeat))
	require.Empty(t, q.decide(), "a heartbeat alone decides nothing")

	// The lease's timer fires 30 s after the claim: the last heartbeat (29 s) keeps the
	// attempt alive, and the decision arms a renewal due 30 s after that heartbeat.
	q.s.apply(q.fire(lease))
	evs := q.decide()
	require.Empty(t, commandsOf(evs), "a frame whose worker heartbeats is not issued again")
	renewals := timersOf(evs)
	require.Len(t, renewals, 1)
	id, due := dueOf(t, renewals[0])
	require.Equal(t, claimed.Add(59*time.Second).UTC(), due, "the lease runs out lease_seconds after the last heartbeat")
	require.Equal(t, domain.CursorLeaseRenewalID(0, 0, 1, body.GetCommandId()), id)
	require.Empty(t, q.decide(), "the renewal is scheduled once")

	// A heartbeat of an older attempt, or of another command, moves nothing.
	unit := func() *sbv1.CursorUnit {
		return q.s.st.GetSteps()["start"].GetCursor().GetSlots()[0].GetFrame().GetUnits()[0]
	}
	before := unit().GetHeartbeatTime().AsTime()
	stray := q.heartbeat(body, 9, time.Second)
	stray.Attempt, stray.CommandId = 2, domain.CursorBodyID("x", "start", 1, 0, 1, 0, 2)
	q.s.apply(stray)
	require.Equal(t, before, unit().GetHeartbeatTime().AsTime(), "another attempt's heartbeat is not this one's")

	// Two more heartbeats, then the worker dies: the renewal renews once more, and the
	// next timer, lease_seconds after the last heartbeat, ends the attempt.
	q.s.apply(q.heartbeat(body, 4, 10*time.Second), q.heartbeat(body, 5, 10*time.Second))
	lastBeat := q.clock
	q.s.apply(q.fire(renewals[0]))
	evs = q.decide()
	require.Empty(t, commandsOf(evs))
	second := timersOf(evs)
	require.Len(t, second, 1)
	_, due = dueOf(t, second[0])
	require.Equal(t, lastBeat.Add(30*time.Second).UTC(), due)
	q.s.apply(q.fire(second[0]))
	evs = q.decide()
	again := commandsOf(evs)
	require.Len(t, again, 1, "no heartbeat for lease_seconds: the frame is issued again")
	require.EqualValues(t, 2, again[0].GetAttempt())
	_, due = dueOf(t, timersOf(evs)[0])
	require.Equal(t, q.clock.Add(30*time.Second).UTC(), due, "the next attempt's lease runs from the expiry")

	// Replay: the same log folded again gives the same state and the same decision.
	st := domain.NewState("x")
	for _, ev := range q.s.log {
		require.NoError(t, domain.Apply(st, ev))
	}
	require.True(t, proto.Equal(q.s.st, st), "folding the log again gives the same state")
	a, err := DecideWith(q.s.c, q.s.st, Inputs{})
	require.NoError(t, err)
	b, err := DecideWith(q.s.c, st, Inputs{})
	require.NoError(t, err)
	require.Equal(t, ids(a), ids(b))

	// The second attempt completes: the frame is processed once, and the summary counts
	// the heartbeats and renewals.
	q.drain(nil, again...)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
	sum := q.summary()
	require.EqualValues(t, 4, sum["processed"])
	require.EqualValues(t, 5, sum["heartbeats"], "the stray heartbeat does not count")
	require.EqualValues(t, 2, sum["renewals"])
	require.EqualValues(t, 1, sum["reissued"])
}

func TestCursorWithoutHeartbeatsLeasesAsBefore(t *testing.T) {
	q, body, lease, _ := startFrame(t, "frame")
	require.Nil(t, body.GetCommand().GetHeartbeat(), "no heartbeat_seconds: the worker sends none")
	require.Nil(t, body.GetCommand().GetTimeout(), "no max_seconds nor spec.timeout: no bound")
	q.s.apply(q.fire(lease))
	again := commandsOf(q.decide())
	require.Len(t, again, 1, "the lease's first timer ends the attempt")
	require.EqualValues(t, 2, again[0].GetAttempt())
	require.Zero(t, q.s.st.GetSteps()["start"].GetCursor().GetRenewals())
}

func TestCursorMaxSecondsBoundsABodyAttempt(t *testing.T) {
	q, body, _, _ := startFrame(t, "frame, max_seconds: 12")
	require.Equal(t, 12*time.Second, body.GetCommand().GetTimeout().AsDuration(), "max_seconds is the attempt's timeout")
	require.Equal(t, "loop.spec.frame.max_seconds", body.GetCommand().GetTimeoutField(), "which the worker's error names")
	claims := 0
	for _, ev := range q.s.log {
		if ev.GetType() == domain.EventCommandIssued && ev.GetIteration().GetIndex() == domain.CursorIndex(0, -1) {
			claims++
			require.Nil(t, ev.GetCommand().GetTimeout(), "a claim is not a body")
		}
	}
	require.Equal(t, 1, claims)
	// The worker stops the body at its timeout: each attempt fails, and after
	// max_attempts (2) the frame's rows count as failed.
	timedOut := func(cmd *eventv1.Event) *eventv1.Event {
		ev := q.answer(cmd, domain.EventCommandFailed)
		ev.Error = &eventv1.ErrorInfo{Code: "deadline_exceeded", Retryable: true, Message: "step start: the attempt ran past its timeout of 12s and was stopped"}
		return ev
	}
	q.s.apply(timedOut(body))
	again := commandsOf(q.decide())
	require.Len(t, again, 1, "a timed-out attempt counts against max_attempts and is issued again")
	require.EqualValues(t, 2, again[0].GetAttempt())
	require.Equal(t, 12*time.Second, again[0].GetCommand().GetTimeout().AsDuration())
	q.s.apply(timedOut(again[0]))
	q.drain(nil)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
	sum := q.summary()
	require.EqualValues(t, 4, sum["failed"])
	require.EqualValues(t, 0, sum["processed"])
	require.Contains(t, sum["last_error"], "past its timeout")
}

func TestCursorMaxSecondsTightensTheStepTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, field string
		want           time.Duration
	}{{"5s", "", 5 * time.Second}, {"1m", "loop.spec.frame.max_seconds", 12 * time.Second}} {
		book := strings.Replace(fmt.Sprintf(cursorBook, "frame, max_seconds: 12"), "    tool: {kind: python", "    spec: {timeout: "+tc.timeout+"}\n    tool: {kind: python", 1)
		q := &queue{s: newSim(t, book, "{}"), n: 4, processed: map[int]int{}, clock: time.Unix(1_700_000_000, 0), stored: map[string][]json.RawMessage{}}
		for _, c := range commandsOf(q.decide()) {
			q.s.apply(q.run(c))
		}
		bodies := commandsOf(q.decide())
		require.Len(t, bodies, 1)
		require.Equal(t, tc.want, bodies[0].GetCommand().GetTimeout().AsDuration(), "spec.timeout %s and max_seconds 12", tc.timeout)
		require.Equal(t, tc.field, bodies[0].GetCommand().GetTimeoutField())
	}
}

// A frame processed whole whose rows are over max_bytes is cut into sub-frames of
// consecutive rows within it, one body each, with ids derived from the claim and the
// sub-frame; the fold learns the cut from the first body and counts each sub-frame's rows.
func TestCursorMaxBytesSplitsAFrameIntoSubFrames(t *testing.T) {
	for _, byRef := range []bool{false, true} {
		t.Run(fmt.Sprintf("by_reference=%v", byRef), func(t *testing.T) {
			q := newQueue(t, "frame, max_bytes: 20", 7)
			q.maxBytes, q.byRef = 20, byRef
			claims := commandsOf(q.decide())
			var sc domain.Scope
			require.NoError(t, json.Unmarshal(claims[0].GetCommand().GetContextJson(), &sc))
			require.EqualValues(t, 20, sc.Iter["cursor"].(map[string]any)["max_bytes"], "the claim reads {{ cursor.max_bytes }}")
			q.s.apply(q.run(claims[0])) // 4 rows of 8 bytes: 32, over 20
			evs := q.decide()
			bodies := commandsOf(evs)
			require.Len(t, bodies, 2, "two sub-frames of two rows (16 bytes) each")
			for unit, b := range bodies {
				require.Equal(t, domain.CursorBodyID("x", "start", 1, 0, 1, int32(unit), 1), b.GetCommandId())
				var p domain.IssuedPayload
				require.NoError(t, json.Unmarshal(b.GetPayloadJson(), &p))
				if unit == 0 {
					require.Equal(t, []int32{0, 2}, p.Cursor.Parts, "the first body tells the fold the cut")
				} else {
					require.Nil(t, p.Cursor.Parts)
				}
				var bsc domain.Scope
				require.NoError(t, json.Unmarshal(b.GetCommand().GetContextJson(), &bsc))
				require.Len(t, bsc.Iter["row"], 2)
				require.EqualValues(t, 2, bsc.Iter["_rows"])
			}
			require.Len(t, timersOf(evs), 2, "each sub-frame has its lease")
			units := q.s.st.GetSteps()["start"].GetCursor().GetSlots()[0].GetFrame().GetUnits()
			require.Len(t, units, 2)
			require.Equal(t, [4]int32{0, 2, 2, 2}, [4]int32{units[0].GetFirstRow(), units[0].GetRows(), units[1].GetFirstRow(), units[1].GetRows()})

			q.drain(nil, append(bodies, claims[1:]...)...)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
			require.Len(t, q.processed, 7)
			for id, n := range q.processed {
				require.Equal(t, 1, n, "row %d processed once", id)
			}
			sum := q.summary()
			require.EqualValues(t, 7, sum["processed"])
			require.EqualValues(t, 0, sum["failed"])
			require.EqualValues(t, 2, sum["frames"], "the claims' frames, however cut")
			require.EqualValues(t, 4, sum["attempts"], "2+2 sub-frames (4 rows, then 3: 2+1)")
		})
	}
}

// A row over max_bytes alone is never sent: its body is refused (a command.issued without
// a command), counted as an attempt and as a failed row naming the setting, the row's size
// and the limit, and the loop goes on; a frame whose units all end so claims again in the
// same decision.
func TestCursorRowOverMaxBytesFailsItsBodyAlone(t *testing.T) {
	for _, process := range []string{"row", "frame"} {
		t.Run(process, func(t *testing.T) {
			q := newQueue(t, process+", max_bytes: 30", 9)
			q.maxBytes = 30
			q.pad = func(id int) int {
				if id == 3 || id == 5 || id == 6 || id == 7 || id == 8 {
					return 40
				}
				return 0
			}
			q.drain(nil)
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, q.s.st.GetStatus(), "%v", q.s.st.GetError())
			require.Equal(t, map[int]int{1: 1, 2: 1, 4: 1, 9: 1}, q.processed)
			sum := q.summary()
			require.EqualValues(t, 4, sum["processed"])
			require.EqualValues(t, 5, sum["failed"])
			require.Contains(t, sum["last_error"], "57 bytes as JSON, over loop.spec.frame.max_bytes (30)")
			refused := 0
			for _, ev := range q.s.log {
				var p domain.IssuedPayload
				if ev.GetType() == domain.EventCommandIssued && json.Unmarshal(ev.GetPayloadJson(), &p) == nil && p.Cursor != nil && p.Cursor.Refused != "" {
					refused++
					require.Nil(t, ev.GetCommand(), "a refused body carries no command")
				}
			}
			require.Equal(t, 5, refused)
			bodies := 4 // row: one per row sent
			if process == "frame" {
				bodies = 3 // [1 2] [4]; [9]
			}
			require.EqualValues(t, bodies+5, sum["attempts"], "refusals count as attempts")
		})
	}
}

const cursorBeatBook = `
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
        frame: {max_rows: %d, lease_seconds: 10, heartbeat_seconds: %d, max_attempts: %d, process: %s}
    tool: {kind: noop}
`

// TestCursorHeartbeatProperties drains random queues as TestCursorLoopProperties does,
// with bodies that heartbeat at random while they wait for their outcome, some of them
// then dying (leases fire once nothing runs: a lease renewed by a dead body's heartbeats
// then runs out), and checks: the loop completes with every row counted once, processed
// at most once, decisions are deterministic, and folding the log from zero yields the
// incremental state, renewals included.
func TestCursorHeartbeatProperties(t *testing.T) {
	renewed := 0
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 20).Draw(rt, "rows")
		maxRows := rapid.IntRange(1, 4).Draw(rt, "max_rows")
		src := fmt.Sprintf(cursorBeatBook, rapid.IntRange(1, 3).Draw(rt, "slots"), maxRows, rapid.IntRange(1, 9).Draw(rt, "heartbeat_seconds"),
			rapid.IntRange(1, 3).Draw(rt, "max_attempts"), rapid.SampledFrom([]string{"row", "frame"}).Draw(rt, "process"))
		q := &queue{s: newSim(t, src, "{}"), n: n, maxRows: maxRows, processed: map[int]int{}, clock: time.Unix(1_700_000_000, 0), stored: map[string][]json.RawMessage{}}
		beats := map[string]int32{}
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
			var p domain.IssuedPayload
			if err := json.Unmarshal(cmd.GetPayloadJson(), &p); err != nil {
				rt.Fatalf("payload: %v", err)
			}
			body := p.Cursor.Phase == domain.CursorPhaseBody
			if body && rapid.IntRange(0, 2).Draw(rt, "beat") == 0 {
				// Still running: a heartbeat, some seconds on; the body stays pending.
				beats[cmd.GetCommandId()]++
				q.s.apply(q.heartbeat(cmd, beats[cmd.GetCommandId()], time.Duration(rapid.IntRange(1, 12).Draw(rt, "after"))*time.Second))
				continue
			}
			pending = append(pending[:i:i], pending[i+1:]...)
			if body && rapid.IntRange(0, 5).Draw(rt, "drop") == 0 {
				continue // its worker died: no outcome, no more heartbeats
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
		again := domain.NewState("x")
		for _, ev := range q.s.log {
			if err := domain.Apply(again, ev); err != nil {
				rt.Fatalf("refold: %v", err)
			}
		}
		if !proto.Equal(again, q.s.st) {
			rt.Fatalf("folding the log from zero differs from the incremental state")
		}
		if q.s.st.GetSteps()["start"].GetCursor().GetRenewals() > 0 {
			renewed++
		}
	})
	require.Positive(t, renewed, "some runs renewed a lease")
}
