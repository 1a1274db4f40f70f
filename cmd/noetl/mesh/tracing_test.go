package mesh_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/telemetry"
	"github.com/noetl/noetl/internal/testkit"
)

// TestOneExecutionIsOneConnectedTrace runs the three-step playbook with every service
// tracing into one in-memory exporter and checks that the execution is one trace: it is
// rooted at the gateway's StartExecution, every span about the execution belongs to it,
// no span's parent is missing, and it holds each service's spans, chained gateway ->
// orchestrator -> materializer -> worker -> materializer -> orchestrator (next decision),
// with no statebuilder span (decisions fold the events the notices carry).
func TestOneExecutionIsOneConnectedTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	pg := testkit.StartPostgres(t)
	natsURL := testkit.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The reconciler would re-drive in a trace of its own; keep it out of the way.
	m, err := mesh.Start(ctx, mesh.Config{StateDir: t.TempDir(), PostgresURL: pg, NATSURL: natsURL, ReconcileEvery: time.Hour,
		Trace: telemetry.Config{SpanExporter: exp}})
	require.NoError(t, err)
	t.Cleanup(m.Stop)
	conn, err := m.Dial()
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	h := &harness{m: m, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn)}

	x := h.run(t, threeSteps, map[string]any{"base": 10}, "")
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, x.GetStatus(), "error: %v", x.GetError())
	id := x.GetExecutionId()

	// A span is exported when it ends; the last commits and decisions end just after the
	// execution completes, so wait until the trace holds them all.
	var tr *spanTree
	testkit.WaitFor(t, 30*time.Second, func() error {
		var err error
		tr, err = executionTrace(exp.GetSpans(), id)
		return err
	})

	root := tr.root
	require.Equal(t, "gateway", service(root))
	require.Equal(t, "noetl.api.v1.ExecutionService/StartExecution", root.Name)
	for _, svc := range []string{"gateway", "orchestrator", "materializer", "worker"} {
		require.NotEmpty(t, tr.byService[svc], "the trace holds %s spans", svc)
	}
	// The decisions advance the orchestrator's cached state with the events the commit
	// notices carry: none reads the statebuilder.
	require.Empty(t, tr.byService["statebuilder"], "a decision read the state from the statebuilder")

	// Each step ran in a worker span named after it, with its tool's span beneath, and
	// carries the execution's attributes.
	tools := map[string]string{"start": "python", "double": "python", "end": "noop"}
	steps := map[string]tracetest.SpanStub{}
	for _, s := range tr.byService["worker"] {
		if step, ok := strings.CutPrefix(s.Name, "step "); ok {
			steps[step] = s
			attrs := attrMap(s.Attributes)
			require.Equal(t, id, attrs[telemetry.AttrExecutionID], s.Name)
			require.Equal(t, "default", attrs[telemetry.AttrTenant], s.Name)
			require.Equal(t, step, attrs[telemetry.AttrStep], s.Name)
			require.NotEmpty(t, attrs[telemetry.AttrAttempt], s.Name)
			require.Equal(t, tools[step], attrs[telemetry.AttrTool], s.Name)
			require.True(t, tr.hasChild(s, "tool "+tools[step]), "%s has a %q child", s.Name, "tool "+tools[step])
		}
	}
	require.Len(t, steps, 3, "a worker span per step")

	// The causal chain: each step's run descends from the commit of its command, which
	// descends from the decision that issued it, back to the previous step's run.
	chain := tr.lineage(steps["end"])
	require.Equal(t, "gateway:noetl.api.v1.ExecutionService/StartExecution", chain[len(chain)-1])
	for _, want := range []string{
		"materializer:commit", "orchestrator:decide",
		"worker:step double", "worker:step start",
		"orchestrator:noetl.orchestrator.v1.OrchestratorService/StartExecution",
	} {
		require.Contains(t, chain, want, "lineage of step end: %v", chain)
	}
	require.Less(t, slices.Index(chain, "worker:step double"), slices.Index(chain, "worker:step start"), "double descends from start")
	// The decision after the last step descends from that step's run.
	next := false
	for _, s := range tr.byService["orchestrator"] {
		if s.Name == "decide" && slices.Contains(tr.lineage(s), "worker:step end") {
			next = true
		}
	}
	require.True(t, next, "a decision descends from the run of step end")
}

// spanTree is one trace's spans.
type spanTree struct {
	root      tracetest.SpanStub
	byID      map[trace.SpanID]tracetest.SpanStub
	byService map[string][]tracetest.SpanStub
}

// executionTrace returns the trace of execution id, or why the spans are not (yet) one
// connected trace: the spans naming the execution must share the trace of a gateway
// StartExecution, and every span of it but the root must have its parent in it.
func executionTrace(spans tracetest.SpanStubs, id string) (*spanTree, error) {
	traces := map[trace.TraceID]bool{}
	for _, s := range spans {
		if attrMap(s.Attributes)[telemetry.AttrExecutionID] == id {
			traces[s.SpanContext.TraceID()] = true
		}
	}
	if len(traces) != 1 {
		return nil, fmt.Errorf("spans of execution %s are in %d traces", id, len(traces))
	}
	var tid trace.TraceID
	for k := range traces {
		tid = k
	}
	tr := &spanTree{byID: map[trace.SpanID]tracetest.SpanStub{}, byService: map[string][]tracetest.SpanStub{}}
	roots := 0
	for _, s := range spans {
		if s.SpanContext.TraceID() != tid {
			continue
		}
		tr.byID[s.SpanContext.SpanID()] = s
		tr.byService[service(s)] = append(tr.byService[service(s)], s)
		if !s.Parent.IsValid() {
			tr.root = s
			roots++
		}
	}
	if roots != 1 {
		return nil, fmt.Errorf("trace %s has %d roots", tid, roots)
	}
	for _, s := range tr.byID {
		if s.Parent.IsValid() {
			if _, ok := tr.byID[s.Parent.SpanID()]; !ok {
				return nil, fmt.Errorf("span %s:%s: parent %s not in the trace (yet)", service(s), s.Name, s.Parent.SpanID())
			}
		}
	}
	steps := 0
	for _, s := range tr.byService["worker"] {
		if strings.HasPrefix(s.Name, "step ") {
			steps++
		}
	}
	if steps < 3 {
		return nil, fmt.Errorf("%d worker step spans so far", steps)
	}
	return tr, nil
}

// lineage lists "service:name" of s's ancestors, its parent first, the root last.
func (tr *spanTree) lineage(s tracetest.SpanStub) []string {
	var out []string
	for s.Parent.IsValid() {
		p, ok := tr.byID[s.Parent.SpanID()]
		if !ok {
			break
		}
		out = append(out, service(p)+":"+p.Name)
		s = p
	}
	return out
}

func (tr *spanTree) hasChild(s tracetest.SpanStub, name string) bool {
	for _, c := range tr.byID {
		if c.Parent.SpanID() == s.SpanContext.SpanID() && c.Name == name {
			return true
		}
	}
	return false
}

func service(s tracetest.SpanStub) string {
	if s.Resource == nil {
		return ""
	}
	v, _ := s.Resource.Set().Value("service.name")
	return v.AsString()
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]string {
	m := make(map[attribute.Key]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

func TestTraceFlag(t *testing.T) {
	for v, want := range map[string]telemetry.Config{
		"":                       {},
		"none":                   {},
		"stdout":                 {Exporter: "stdout"},
		"otel-collector:4317":    {Exporter: "otlp", Endpoint: "otel-collector:4317"},
		"https://collector:4317": {Exporter: "otlp", Endpoint: "https://collector:4317"},
	} {
		require.Equal(t, want, mesh.TraceConfig(v), v)
	}
}
