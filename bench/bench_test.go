package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// refusal is the gateway's answer past a per-tenant limit, with a RetryInfo of d and the
// other details given.
func refusal(t *testing.T, d time.Duration, details ...protoadapt.MessageV1) error {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "tenant default: 256 calls in flight exceeded; retry after 1s").
		WithDetails(append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d)})...)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func TestRetryExhaustedRetriesRefusalsAndCountsThem(t *testing.T) {
	var refused, unavailable atomic.Int64
	calls := 0
	v, err := retryExhausted(context.Background(), &refused, &unavailable, func() (string, error) {
		calls++
		switch calls {
		case 1:
			return "", refusal(t, time.Millisecond)
		case 2:
			return "", status.Error(codes.ResourceExhausted, "no hint") // exponential backoff
		}
		return "started", nil
	})
	if err != nil || v != "started" {
		t.Fatalf("got %q, %v; want started", v, err)
	}
	if refused.Load() != 2 || calls != 3 {
		t.Fatalf("refused %d, calls %d; want 2 and 3", refused.Load(), calls)
	}
}

func TestRetryExhaustedStopsOnOtherErrors(t *testing.T) {
	var refused, unavailable atomic.Int64
	calls := 0
	_, err := retryExhausted(context.Background(), &refused, &unavailable, func() (int, error) {
		calls++
		return 0, status.Error(codes.NotFound, "no playbook bench/x")
	})
	if status.Code(err) != codes.NotFound || calls != 1 || refused.Load() != 0 {
		t.Fatalf("err %v, calls %d, refused %d; want NotFound at once", err, calls, refused.Load())
	}
}

func TestRetryExhaustedGivesUpAfterRetryFor(t *testing.T) {
	old := *retryFor
	*retryFor = 30 * time.Millisecond
	t.Cleanup(func() { *retryFor = old })
	var refused, unavailable atomic.Int64
	_, err := retryExhausted(context.Background(), &refused, &unavailable, func() (int, error) {
		return 0, refusal(t, 5*time.Millisecond)
	})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("err %v; want the last refusal, giving up", err)
	}
	if refused.Load() < 1 {
		t.Fatalf("refused %d; want at least 1", refused.Load())
	}
}

func TestRetryDelayReadsRetryInfo(t *testing.T) {
	st, _ := status.FromError(refusal(t, 1500*time.Millisecond))
	if d := retryDelay(st); d != 1500*time.Millisecond {
		t.Fatalf("delay %s; want 1.5s", d)
	}
	if d := retryDelay(status.New(codes.ResourceExhausted, "x")); d != 0 {
		t.Fatalf("delay %s without RetryInfo; want 0", d)
	}
	// Without the detail, the gateway's message names the delay.
	for msg, want := range map[string]time.Duration{
		"tenant default: 256 calls in flight exceeded; retry after 1s":           time.Second,
		"authentication: too many failed attempts for k; retry after 2.5s":       2500 * time.Millisecond,
		"tenant acme: 50 calls per second exceeded; retry after 20ms; then some": 20 * time.Millisecond,
		"tenant default: 256 calls in flight exceeded; retry after soon":         0,
		"tenant default: 256 calls in flight exceeded; retry after -1s":          0,
	} {
		if d := retryDelay(status.New(codes.ResourceExhausted, msg)); d != want {
			t.Errorf("delay of %q: %s; want %s", msg, d, want)
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1, unsorted
	}
	if p := percentile(xs, 50); p != 50 {
		t.Errorf("p50 %v; want 50", p)
	}
	if p := percentile(xs, 99); p != 99 {
		t.Errorf("p99 %v; want 99", p)
	}
	if p := percentile([]float64{7}, 99); p != 7 {
		t.Errorf("p99 of one %v; want 7", p)
	}
	if p := percentile(nil, 50); p != 0 {
		t.Errorf("p50 of none %v; want 0", p)
	}
}

func TestOutcomesPreferCommandCompletedOverCallDone(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(typ, step string, ms int, it *eventv1.Iteration) *apiv1.Event {
		return &apiv1.Event{Type: typ, Step: step, Iteration: it, CommitTime: timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))}
	}
	o := newOutcomes()
	for _, e := range []*apiv1.Event{
		ev(evCallDone, "a", 10, nil), ev(evCommandCompleted, "a", 12, nil), // an old log's step
		ev(evCommandCompleted, "b", 20, nil), // a new log's step
		ev(evCommandCompleted, "b", 30, nil), // a later duplicate does not move it
		ev(evCallDone, "c", 40, nil),         // call.done alone
		ev(evCommandCompleted, "l", 50, &eventv1.Iteration{Index: 0}),
		ev(evCommandCompleted, "l", 51, &eventv1.Iteration{Index: 1}),
		ev("step.exit", "l", 60, nil),
	} {
		o.add(e)
	}
	want := map[outcomeKey]int{{"a", -1}: 12, {"b", -1}: 20, {"c", -1}: 40, {"l", 0}: 50, {"l", 1}: 51}
	if len(o.order) != len(want) {
		t.Fatalf("outcomes %v; want %d", o.order, len(want))
	}
	for k, ms := range want {
		if got := o.at[k]; !got.Equal(t0.Add(time.Duration(ms) * time.Millisecond)) {
			t.Errorf("%v at %s; want +%dms", k, got, ms)
		}
	}
}

func TestReadStatOfThisProcess(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != os.Getppid() || st.cpu < 0 {
		t.Fatalf("stat %+v; want ppid %d", st, os.Getppid())
	}
	if _, err := readStat(-1); !errors.Is(err, errNoStat) {
		t.Fatalf("stat of pid -1: %v; want errNoStat", err)
	}
}
