package mesh_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/materializer"
	"github.com/noetl/noetl/services/orchestrator"
	"github.com/noetl/noetl/services/statebuilder"
)

// TestExtraReplicasKeepTheLogIdentical adds, beside the mesh, a second materializer with
// its own durable consumer (so two writers commit every event: two replicas holding one
// partition by mistake) and a second orchestrator sharing the decision consumer (so two
// orchestrators decide concurrently on one execution's notices). Executions started
// concurrently interleave across partitions. Each log must equal a clean run's: same
// event ids in the same seq order.
func TestExtraReplicasKeepTheLogIdentical(t *testing.T) {
	clean := start(t, false)
	want := clean.runFull(t, "replica-key")

	h := start(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	log := slog.New(slog.DiscardHandler)
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return l
	}
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && ctx.Err() == nil {
				t.Errorf("extra replica stopped: %v", err)
			}
		}()
	}
	run(func() error {
		return materializer.Run(ctx, materializer.Config{PostgresURL: h.m.PostgresURLs.Materializer, NATSURL: h.m.NATSURL, Consumer: "materializer-rogue", AdminListener: listen()}, log)
	})
	sbLis := listen()
	run(func() error {
		return statebuilder.Run(ctx, statebuilder.Config{PostgresURL: h.m.PostgresURLs.Statebuilder, InternalSecret: h.m.InternalSecret, GRPCListener: sbLis, AdminListener: listen()}, log)
	})
	run(func() error {
		return orchestrator.Run(ctx, orchestrator.Config{PostgresURL: h.m.PostgresURLs.Orchestrator, InternalSecret: h.m.InternalSecret, NATSURL: h.m.NATSURL, StatebuilderAddr: sbLis.Addr().String(), GRPCListener: listen(), AdminListener: listen()}, log)
	})

	// Several executions at once, one of them with the clean run's key.
	results := make(chan *harnessRun, 6)
	for i := 0; i < 6; i++ {
		key := fmt.Sprintf("other-%d", i)
		if i == 0 {
			key = "replica-key"
		}
		go func() { results <- h.runFull(t, key) }()
	}
	deadline := time.After(2 * time.Minute)
	for i := 0; i < 6; i++ {
		select {
		case got := <-results:
			require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got.exec.GetStatus())
			require.Equal(t, ids(want), ids(got), "log of %s", got.exec.GetExecutionId())
			if got.exec.GetExecutionId() == want.exec.GetExecutionId() {
				require.Equal(t, eventIDs(want), eventIDs(got), "same execution, same events in the same order")
			}
		case <-deadline:
			t.Fatal("executions did not finish")
		}
	}
}

// ids lists "type step attempt" lines of an execution's log in seq order, without the
// progress reports whose presence depends on timing (progressReport), so logs of
// different executions compare by shape.
func ids(x *harnessRun) []string {
	var out []string
	for _, ev := range x.events {
		if !progressReport(ev) {
			out = append(out, fmt.Sprintf("%s %s %d", ev.GetType(), ev.GetStep(), ev.GetAttempt()))
		}
	}
	return out
}

// eventIDs lists the ids of an execution's events in seq order, without progress reports
// (progressReport).
func eventIDs(x *harnessRun) []string {
	var out []string
	for _, ev := range x.events {
		if !progressReport(ev) {
			out = append(out, ev.GetEventId())
		}
	}
	return out
}
