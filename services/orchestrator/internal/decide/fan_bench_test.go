package decide

import (
	"fmt"
	"testing"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// fanSrc is a loop of 1,000 parallel no-op iterations, all in flight at once.
const fanSrc = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: f, path: t/p}
workload:
  n: 1000
workflow:
  - step: start
    loop:
      in: "{{ range(workload.n) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 1000}
    tool: {kind: noop}
`

// BenchmarkFanStart: the decision that enters the loop and issues its 1,000 commands.
func BenchmarkFanStart(b *testing.B) {
	for b.Loop() {
		s := newSim(b, fanSrc, `{"n":1000}`)
		evs, err := Decide(s.c, s.st)
		if n := len(expanded(evs)); err != nil || n < 1000 {
			b.Fatal(err, n)
		}
	}
}

// BenchmarkFanComplete: a decision with half the iterations completed and none left to
// issue, as each batch of results is folded.
func BenchmarkFanComplete(b *testing.B) {
	s := newSim(b, fanSrc, `{"n":1000}`)
	evs, _ := Decide(s.c, s.st)
	s.apply(evs...)
	var cmds []*eventv1.Event
	for _, ev := range expanded(evs) {
		if ev.GetType() == domain.EventCommandIssued {
			cmds = append(cmds, ev)
		}
	}
	for _, c := range cmds[:500] {
		s.complete(c)
	}
	b.ResetTimer()
	for b.Loop() {
		out, err := Decide(s.c, s.st)
		if err != nil {
			b.Fatal(err, len(out))
		}
	}
}

// chainSrc is a chain of plain next: arcs, as the bench's chain workload runs it.
const chainSrc = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: c, path: t/p}
workload:
  n: 3
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: s1}]
  - step: s1
    tool: {kind: noop}
    next: [{step: s2}]
  - step: s2
    tool: {kind: noop}
`

// BenchmarkChainStep: the decision after one step of a chain completed, which exits it
// and enters the next.
func BenchmarkChainStep(b *testing.B) {
	s := newSim(b, chainSrc, `{"n":3}`)
	evs, _ := Decide(s.c, s.st)
	s.apply(evs...)
	for _, ev := range expanded(evs) {
		if ev.GetType() == domain.EventCommandIssued {
			s.complete(ev)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		out, err := Decide(s.c, s.st)
		if err != nil || len(out) == 0 {
			b.Fatal(err, len(out))
		}
	}
}

// longChainState is the state of a chain of n steps (the playbook limit is 5,000) whose
// first n-1 steps completed and were routed, and whose last is running.
func longChainState(n int) *sbv1.ExecutionState {
	st := domain.NewState("x")
	for i := range n - 1 {
		st.Steps[fmt.Sprintf("s%d", i)] = &sbv1.StepState{Name: fmt.Sprintf("s%d", i), Routed: true, Status: eventv1.StepStatus_STEP_STATUS_COMPLETED}
	}
	last := fmt.Sprintf("s%d", n-1)
	st.Steps[last] = &sbv1.StepState{Name: last, Status: eventv1.StepStatus_STEP_STATUS_RUNNING}
	return st
}

// BenchmarkActiveOfLongChain: the walk a decision on a 5,000-step chain made before each
// cached state kept an index (about 80 µs on the development machine, against 0.2 µs for the index).
func BenchmarkActiveOfLongChain(b *testing.B) {
	st := longChainState(5000)
	for b.Loop() {
		if a := ActiveOf(st); len(a.names) != 1 {
			b.Fatal(a.names)
		}
	}
}

// BenchmarkActiveIndexLongChain: the same answer from the index, one event folded into the
// running step between two decisions, as in a chain.
func BenchmarkActiveIndexLongChain(b *testing.B) {
	st := longChainState(5000)
	var x ActiveIndex
	x.Of(st)
	ev := &eventv1.Event{Step: "s4999", Type: domain.EventCommandStarted}
	for b.Loop() {
		st.Seq++
		ev.Seq = st.Seq
		x.Folded(st, ev)
		if a := x.Of(st); len(a.names) != 1 {
			b.Fatal(a.names)
		}
	}
}
