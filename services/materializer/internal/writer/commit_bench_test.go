package writer

import (
	"context"
	"fmt"
	"testing"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/domain"
)

// BenchmarkCommitChainStep commits what one step of a chain commits: the previous
// command's outcome with the decision it causes (the step's exit, the next step's entry and
// its command), in one transaction on the writer's heads (one round trip), against a
// private Postgres. It measures the commit's wall time, the part of a chain step's latency
// that Postgres takes.
func BenchmarkCommitChainStep(b *testing.B) {
	chainSteps(b, newWriter(b))
}

func chainSteps(b *testing.B, w *Writer) {
	ctx := context.Background()
	if _, err := w.Commit(ctx, []*eventv1.Event{ev("a", "start", domain.EventPlaybookStarted)}, nil); err != nil {
		b.Fatal(err)
	}
	prev := "start"
	b.ResetTimer()
	for i := range b.N {
		done := ev("a", fmt.Sprintf("done-%d", i), domain.EventCommandCompleted)
		done.CommandId = prev + "-cmd"
		done.EventId = domain.EventID(done.CommandId, domain.EventCommandCompleted)
		done.PayloadJson = []byte(`{"result":{"ok":true},"start_time":"2026-12-06T15:00:00Z"}`)
		exit := ev("a", fmt.Sprintf("exit-%d", i), domain.EventStepExit)
		exit.PayloadJson = []byte(`{"fired":["next"]}`)
		enter := ev("a", fmt.Sprintf("enter-%d", i), domain.EventStepEnter)
		next := issued("a", fmt.Sprintf("issued-%d", i))
		prev = next.GetEventId()
		next.CommandId = prev + "-cmd"
		if _, err := w.Commit(ctx, []*eventv1.Event{done, exit, enter, next}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if taken, missed := w.FastStats(); missed != 0 || taken < uint64(b.N) {
		b.Fatalf("one-round-trip commits: %d taken, %d missed of %d", taken, missed, b.N)
	}
}

// BenchmarkCommitDecidedSteps commits, per operation, the outcomes of execs executions'
// steps with the decisions they cause (an in-process decider), in one transaction on the
// writer's heads, with and without the head start (headstart.go, which takes it for one
// execution's batch alone).
func BenchmarkCommitDecidedSteps(b *testing.B) {
	for _, execs := range []int{1, 8} {
		for _, head := range []bool{false, true} {
			b.Run(fmt.Sprintf("execs=%d/head=%v", execs, head), func(b *testing.B) {
				ctx := context.Background()
				w := newWriter(b)
				w.Decide, w.noHeadStart = &decider{answer: next}, !head
				var starts []*eventv1.Event
				for k := range execs {
					starts = append(starts, ev(fmt.Sprintf("x%d", k), fmt.Sprintf("x%d-start", k), domain.EventPlaybookStarted))
				}
				if _, err := w.Commit(ctx, starts, nil); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					var evs []*eventv1.Event
					for k := range execs {
						e := ev(fmt.Sprintf("x%d", k), fmt.Sprintf("x%d-done-%d", k, i), domain.EventCommandCompleted)
						e.CommandId = e.EventId + "-cmd"
						e.PayloadJson = []byte(`{"result":{"ok":true}}`)
						evs = append(evs, e)
					}
					if _, err := w.Commit(ctx, evs, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				// A head start is taken only for a batch of one execution (headstart.go):
				// a batch of several is a writer behind, where it costs throughput.
				switch {
				case head && execs == 1 && w.HeadStarts() < uint64(b.N):
					b.Fatalf("%d head starts in %d commits", w.HeadStarts(), b.N)
				case execs > 1 && w.HeadStarts() != 0:
					b.Fatalf("%d head starts in %d commits of %d executions each", w.HeadStarts(), b.N, execs)
				}
			})
		}
	}
}

// BenchmarkCommitFanOutOutcomes commits, per operation, the outcomes of one execution's
// parallel loop in one transaction, as a wide fan-out's materializer does while its workers
// run, against a private Postgres: 500 of them (one round trip, the columns as arrays,
// arrays.go) and copyMin (COPY, copydata.go). It measures the client's work per row
// (-benchmem) and the commit's wall time.
func BenchmarkCommitFanOutOutcomes(b *testing.B) {
	for _, width := range []int{500, copyMin} {
		b.Run(fmt.Sprintf("rows=%d", width), func(b *testing.B) {
			ctx := context.Background()
			w := newWriter(b)
			if _, err := w.Commit(ctx, []*eventv1.Event{ev("f", "f-start", domain.EventPlaybookStarted)}, nil); err != nil {
				b.Fatal(err)
			}
			copies := w.copies.Load()
			b.ResetTimer()
			for i := range b.N {
				evs := make([]*eventv1.Event, width)
				for k := range evs {
					e := ev("f", fmt.Sprintf("f-done-%d-%d", i, k), domain.EventCommandCompleted)
					e.Step, e.CommandId = "fan", fmt.Sprintf("f-cmd-%d-%d", i, k)
					e.PayloadJson = []byte(`{"result":null,"start_time":"2026-12-07T12:00:00Z"}`)
					evs[k] = e
				}
				if _, err := w.Commit(ctx, evs, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			want := uint64(0)
			if width >= copyMin {
				want = uint64(b.N)
			}
			if got := w.copies.Load() - copies; got != want {
				b.Fatalf("%d of %d commits of %d rows went in with COPY", got, b.N, width)
			}
		})
	}
}
