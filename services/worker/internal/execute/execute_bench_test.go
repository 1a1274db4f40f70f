package execute

import (
	"context"
	"testing"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// BenchmarkExecuteNoopStep runs the command of a chain's noop step (bench's chain and
// concurrent workloads) whose context carries a small workload and three earlier steps.
func BenchmarkExecuteNoopStep(b *testing.B) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "s4", PlaybookPath: "bench/chain", Attempt: 1,
		Tools: []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"kind":"noop"}`)}},
		ContextJson: []byte(`{"execution_id":"x1","workload":{"n":10,"name":"bench"},"ctx":{},` +
			`"steps":{"start":{"status":"completed"},"s1":{"status":"completed"},"s2":{"status":"completed","result":{"ok":true}}}}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if evs := ex.Execute(ctx, cmd); len(evs) != 1 || evs[0].GetError() != nil {
			b.Fatalf("%v", evs)
		}
	}
}

// BenchmarkExecuteNoopIteration runs the command of one iteration of bench's fanout
// workload: a noop tool without templates, its context the workload, an empty ctx and the
// iteration's scope.
func BenchmarkExecuteNoopIteration(b *testing.B) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "start", PlaybookPath: "bench/fanout", Attempt: 1,
		Iteration:   &eventv1.Iteration{Index: 7},
		Tools:       []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"kind":"noop"}`)}},
		InputJson:   []byte(`null`),
		ContextJson: []byte(`{"execution_id":"x1","workload":{"n":2000},"ctx":{},"iter":{"_index":7,"_total":2000,"i":7},"iterator":"i"}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if evs := ex.Execute(ctx, cmd); len(evs) != 1 || evs[0].GetError() != nil {
			b.Fatalf("%v", evs)
		}
	}
}

// BenchmarkExecuteTemplatedIteration runs the command of a loop iteration whose tool reads
// the iteration's item: {{ i }}.
func BenchmarkExecuteTemplatedIteration(b *testing.B) {
	ex := testExecutor()
	ex.Tools["noop"] = tools.Noop{}
	cmd := &eventv1.Command{CommandId: "c1", ExecutionId: "x1", Tenant: "t", Step: "start", PlaybookPath: "bench/fanout", Attempt: 1,
		Iteration:   &eventv1.Iteration{Index: 7},
		Tools:       []*eventv1.ToolCall{{Kind: "noop", ConfigJson: []byte(`{"kind":"noop","result":{"item":"{{ i }}"}}`)}},
		InputJson:   []byte(`null`),
		ContextJson: []byte(`{"execution_id":"x1","workload":{"n":2000,"api":"http://example.test","pages":[1,2,3]},"ctx":{"token_name":"t"},"iter":{"_index":7,"_total":2000,"i":7},"iterator":"i"}`)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if evs := ex.Execute(ctx, cmd); len(evs) != 1 || evs[0].GetError() != nil {
			b.Fatalf("%v", evs)
		}
	}
}
