package main

import (
	"context"
	"testing"
	"time"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/gateway"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestBenchBacksOffAGatewayThatShedsStarts runs the concurrent workload's measured phase
// against a real mesh whose gateway lets a tenant have two calls in flight and two waiting
// calls: 20 executions at once must be shed (each holds a start that waits, or a
// WaitExecution, until it ends), retried after the
// gateway's RetryInfo, and all complete, and the line counts the shed calls and every
// step.
func TestBenchBacksOffAGatewayThatShedsStarts(t *testing.T) {
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL,
		Gateway: func(c *gateway.Config) { c.TenantInFlight, c.TenantWaits = 2, 2 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cat, exe := apiv1.NewCatalogServiceClient(conn), apiv1.NewExecutionServiceClient(conn)
	reg, err := cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: chain("shed_2", 2)})
	if err != nil {
		t.Fatal(err)
	}
	const executions = 20
	sh := &shed{}
	o, err := measure(ctx, exe, reg.GetPlaybook().GetPath(), executions, sh)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.firstErr(); err != nil {
		t.Fatalf("%d of %d completed; first error: %v", o.completed(), executions, err)
	}
	if sh.starts.Load()+sh.waits.Load() == 0 {
		t.Fatal("no call was shed with 20 executions against 2 calls in flight")
	}
	lat, err := latencies(ctx, exe, o.started(), sh, chainStepLatencies)
	if err != nil {
		t.Fatal(err)
	}
	line := stepLine("concurrent", 2, o, lat, chainLatencyScope, sh)
	if line["steps"] != 2*executions || line["executions_completed"] != executions || line["latency_samples"] != 2*executions {
		t.Fatalf("steps %v, completed %v, samples %v; want %d, %d, %d", line["steps"], line["executions_completed"], line["latency_samples"], 2*executions, executions, 2*executions)
	}
	if line["starts_shed"].(int64)+line["waits_shed"].(int64) == 0 {
		t.Fatalf("line %v counts no shed call", line)
	}
	if p50, p99 := line["step_p50_ms"].(float64), line["step_p99_ms"].(float64); p50 <= 0 || p99 < p50 {
		t.Fatalf("step_p50_ms %v, step_p99_ms %v; want 0 < p50 <= p99", p50, p99)
	}
}
