package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// inFlightRefused is the gateway's refusal for calls in flight: RESOURCE_EXHAUSTED with an
// ErrorInfo TOO_MANY_IN_FLIGHT and a RetryInfo of d.
func inFlightRefused(t *testing.T, d time.Duration) error {
	return refusal(t, d, &errdetails.ErrorInfo{Reason: reasonTooManyInFlight, Domain: "noetl.io"})
}

// size is w's bound now.
func (w *window) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(1, int(w.limit))
}

func TestWindowCutsOnRefusalAndGrowsAsExecutionsEnd(t *testing.T) {
	w := newWindow(100)
	ctx := context.Background()
	for range 50 {
		if err := w.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// 49 others running filled the cap: the bound goes to nine tenths of them, and a crowd
	// refused together does not cut it further than its last member's figure.
	if !w.refused(w.ended()) || w.size() != 44 {
		t.Fatalf("refused with 49 others: size %d; want 44", w.size())
	}
	if !w.refused(w.ended()) || w.size() != 44 {
		t.Fatalf("a second refusal at once: size %d; want 44 still", w.size())
	}
	w.release(false) // the refused start gives its slot back
	// 49 hold slots over a bound of 44: a start waits until six have ended.
	got := make(chan error, 1)
	go func() { got <- w.acquire(ctx) }()
	for range 6 {
		select {
		case err := <-got:
			t.Fatalf("acquired (%v) with the window full", err)
		default:
		}
		w.release(true)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a slot freed by six ends was not taken")
	}
	// Each end added one over the bound: six ends of a bound of 44 do not reach 45, 46 do.
	if w.size() != 44 {
		t.Fatalf("size %d after six ends; want 44", w.size())
	}
	for range 40 {
		w.release(true)
	}
	if w.size() != 45 {
		t.Fatalf("size %d after 46 ends; want 45", w.size())
	}
	// Alone, a refusal is for other clients' calls: the bound stays and the delay applies.
	lone := newWindow(3)
	if err := lone.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if lone.refused(lone.ended()) || lone.size() != 3 {
		t.Fatalf("lone refusal: size %d; want it left at 3 and the delay to apply", lone.size())
	}
	// Alone now, but another execution of the window ended after the start was sent: its
	// calls were the ones counted, and they are free. Retry without the delay; the bound stays.
	pair := newWindow(3)
	for range 2 {
		if err := pair.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sent := pair.ended()
	pair.release(true) // the other execution ends while the start is answered
	if !pair.refused(sent) || pair.size() != 3 {
		t.Fatalf("refusal answered as the others ended: size %d; want a retry and the bound left at 3", pair.size())
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	full := newWindow(1)
	_ = full.acquire(ctx)
	if err := full.acquire(cancelled); err == nil {
		t.Fatal("acquire on a full window returned without its context")
	}
}

// cappedGateway admits at most capacity executions between their start and the wait that
// finds them complete, and refuses other starts for calls in flight with a retry delay of an
// hour; the wait holds its execution until release says.
type cappedGateway struct {
	apiv1.ExecutionServiceClient
	t        *testing.T
	capacity int
	release  chan struct{}
	refusing chan struct{} // closed at the first refusal

	mu       sync.Mutex
	inFlight int
	peak     int
	refused  int
	n        int
}

func (g *cappedGateway) StartExecution(_ context.Context, _ *apiv1.StartExecutionRequest, _ ...grpc.CallOption) (*apiv1.StartExecutionResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight >= g.capacity {
		if g.refused++; g.refused == 1 && g.refusing != nil {
			close(g.refusing)
		}
		return nil, inFlightRefused(g.t, time.Hour)
	}
	g.inFlight++
	g.peak = max(g.peak, g.inFlight)
	g.n++
	return &apiv1.StartExecutionResponse{ExecutionId: fmt.Sprint("x", g.n)}, nil
}

func (g *cappedGateway) WaitExecution(ctx context.Context, in *apiv1.WaitExecutionRequest, _ ...grpc.CallOption) (*apiv1.WaitExecutionResponse, error) {
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return &apiv1.WaitExecutionResponse{Execution: &apiv1.Execution{ExecutionId: in.GetExecutionId(), Status: eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED}}, nil
}

// TestMeasureRetriesInFlightRefusalsAsItsExecutionsEnd runs 60 executions against a
// gateway that lets five be in flight and asks a refused start to wait an hour: the bench
// retries each refused start when one of its own executions ends, so all complete well
// within the test's deadline, the refusals are counted, and the gateway never held more
// than its cap. No execution ends before the first refusal, so the run meets the cap
// however its goroutines are scheduled.
func TestMeasureRetriesInFlightRefusalsAsItsExecutionsEnd(t *testing.T) {
	g := &cappedGateway{t: t, capacity: 5, release: make(chan struct{}), refusing: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() { // after the first refusal, one execution ends at a time, until the run is over
		select {
		case <-g.refusing:
		case <-ctx.Done():
			return
		}
		for {
			select {
			case g.release <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	sh := &shed{}
	o, err := measure(ctx, g, "bench/chain_2", 60, sh)
	if err != nil {
		t.Fatal(err)
	}
	if o.completed() != 60 || o.firstErr() != nil {
		t.Fatalf("completed %d of 60, first error %v", o.completed(), o.firstErr())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refused == 0 || sh.starts.Load() != int64(g.refused) {
		t.Fatalf("gateway refused %d starts, bench counted %d; want the same, more than none", g.refused, sh.starts.Load())
	}
	if g.peak != g.capacity || g.n != 60 {
		t.Fatalf("peak in flight %d, started %d; want %d and 60", g.peak, g.n, g.capacity)
	}
}
