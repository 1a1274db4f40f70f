package decide

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/playbook/template"
)

// genPlaybook draws a random acyclic playbook: steps with arcs to later steps (exclusive
// or inclusive, with true, false or workload-dependent conditions) and some loop steps.
func genPlaybook(t *rapid.T) string {
	n := rapid.IntRange(2, 7).Draw(t, "steps")
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: p, path: t/p}\nworkflow:\n")
	name := func(i int) string {
		if i == 0 {
			return "start"
		}
		return fmt.Sprintf("s%d", i)
	}
	conds := []string{"", "{{ true }}", "{{ false }}", "{{ workload.flag }}"}
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: noop}\n", name(i))
		if rapid.Bool().Draw(t, fmt.Sprintf("loop%d", i)) && i > 0 {
			mode := rapid.SampledFrom([]string{"sequential", "parallel"}).Draw(t, fmt.Sprintf("mode%d", i))
			fmt.Fprintf(&b, "    loop: {in: \"{{ workload.items }}\", iterator: it, spec: {mode: %s, max_in_flight: 2}}\n", mode)
		}
		if i == n-1 {
			continue
		}
		targets := rapid.SliceOfNDistinct(rapid.IntRange(i+1, n-1), 1, 3, rapid.ID[int]).Draw(t, fmt.Sprintf("arcs%d", i))
		mode := rapid.SampledFrom([]string{"exclusive", "inclusive"}).Draw(t, fmt.Sprintf("next%d", i))
		fmt.Fprintf(&b, "    next:\n      spec: {mode: %s}\n      arcs:\n", mode)
		for _, tgt := range targets {
			c := rapid.SampledFrom(conds).Draw(t, fmt.Sprintf("when%d_%d", i, tgt))
			if c == "" {
				fmt.Fprintf(&b, "        - step: %s\n", name(tgt))
			} else {
				fmt.Fprintf(&b, "        - {step: %s, when: \"%s\"}\n", name(tgt), c)
			}
		}
	}
	return b.String()
}

// TestFoldAndDecideProperties runs random playbooks to their end with random completion
// orders and failures, and checks: exactly one terminal event, gap-free seq, decide is
// deterministic, folding the log from zero equals the incremental state, and folding from
// a snapshot taken at a random seq equals folding from zero.
func TestFoldAndDecideProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		src := genPlaybook(t)
		pb, err := playbook.Parse([]byte(src))
		if err != nil {
			t.Fatalf("generated playbook does not parse: %v\n%s", err, src)
		}
		c := Compile(pb, "t/p", 1, template.NewRenderer())
		items := rapid.SliceOfN(rapid.IntRange(0, 9), 0, 3).Draw(t, "items")
		flag := rapid.Bool().Draw(t, "flag")
		workload := fmt.Sprintf(`{"items":%s,"flag":%v}`, jsonInts(items), flag)

		st := domain.NewState("x")
		var log []*eventv1.Event
		// The index of active steps is kept as the engine keeps it, noting every folded
		// event but one (the index must then walk the state again rather than trust itself).
		var idx ActiveIndex
		unnoted := rapid.IntRange(0, 40).Draw(t, "unnoted event")
		apply := func(ev *eventv1.Event) {
			ev = proto.Clone(ev).(*eventv1.Event)
			ev.Seq = st.GetSeq() + 1
			if err := domain.Apply(st, ev); err != nil {
				t.Fatalf("apply %s: %v", ev.GetType(), err)
			}
			if ev.GetSeq() != int64(unnoted) {
				idx.Folded(st, ev)
			}
			log = append(log, ev)
		}
		apply(&eventv1.Event{EventId: "start", ExecutionId: "x", Type: domain.EventPlaybookStarted, PayloadJson: []byte(`{"path":"t/p","version":1,"workload":` + workload + `}`)})
		var pending []*eventv1.Event
		// Loop collections travel inline or, as the engine does for large ones, by reference.
		refs := rapid.Bool().Draw(t, "collections by reference")
		// Iteration results are small, or large enough that a loop's list of them goes past
		// the inline budget and the engine assembles it by reference.
		resultPad := rapid.SampledFrom([]int{0, 30 << 10}).Draw(t, "result size")
		in := Inputs{Collections: map[string][]json.RawMessage{}, LoopResults: map[string]*eventv1.ResultRef{}}
		for round := 0; round < 500 && !domain.IsTerminalStatus(st.GetStatus()); round++ {
			for _, n := range NeededLoopResults(st) {
				if _, err := DecideWith(c, st, in); !errors.Is(err, ErrLoopResultsMissing) {
					t.Fatalf("decide without a loop's list of results: %v", err)
				}
				body, ref := assembleLoopResults(t, log, n)
				var list []json.RawMessage
				require.NoError(t, json.Unmarshal(body, &list))
				require.Len(t, list, n.Total)
				in.LoopResults[n.EnterEventID] = ref
			}
			requireSameAsUnfiltered(t, c, st, in)
			requireSameActive(t, ActiveOf(st), idx.Of(st))
			evs, err := DecideWith(c, st, in)
			if err != nil {
				t.Fatalf("decide: %v", err)
			}
			if refs {
				byRef(t, evs, &in)
			}
			again, _ := DecideWith(c, st, in)
			if len(again) != len(evs) {
				t.Fatalf("decide is not deterministic")
			}
			for i := range evs {
				if evs[i].GetEventId() != again[i].GetEventId() {
					t.Fatalf("decide is not deterministic at %d", i)
				}
				apply(evs[i])
				for _, x := range expandIssued(evs[i]) {
					if x.GetType() == domain.EventCommandIssued {
						pending = append(pending, x)
					}
				}
			}
			if len(pending) == 0 {
				if len(evs) == 0 {
					break
				}
				continue
			}
			k := rapid.IntRange(0, len(pending)-1).Draw(t, "pick")
			cmd := pending[k]
			pending = append(pending[:k], pending[k+1:]...)
			fail := rapid.IntRange(0, 9).Draw(t, "fail") == 0
			mk := func(typ string) *eventv1.Event {
				return &eventv1.Event{EventId: domain.EventID(cmd.GetCommandId(), typ), ExecutionId: "x", Type: typ, Step: cmd.GetStep(), CommandId: cmd.GetCommandId(), Iteration: cmd.GetIteration(), Attempt: cmd.GetAttempt()}
			}
			apply(mk(domain.EventCommandStarted))
			if fail {
				e := mk(domain.EventCommandFailed)
				e.Error = &eventv1.ErrorInfo{Message: "boom"}
				apply(e)
			} else {
				d := mk(domain.EventCallDone)
				d.ResultJson = []byte(`{"ok":true,"pad":"` + strings.Repeat("x", resultPad) + `"}`)
				apply(d)
				apply(mk(domain.EventCommandCompleted))
			}
		}
		if !domain.IsTerminalStatus(st.GetStatus()) {
			t.Fatalf("execution did not end; running=%d\n%s", st.GetRunning(), src)
		}
		terminals := 0
		for i, ev := range log {
			if ev.GetSeq() != int64(i+1) {
				t.Fatalf("gap at %d", i)
			}
			if domain.IsTerminal(ev.GetType()) {
				terminals++
			}
		}
		if terminals != 1 {
			t.Fatalf("%d terminal events", terminals)
		}
		// A loop's list of results is in the state or, assembled, in its step.exit.
		for name, s := range st.GetSteps() {
			if s.GetLoop().GetResultsOmitted() && s.GetStatus() == eventv1.StepStatus_STEP_STATUS_COMPLETED && s.GetResultRef() == nil {
				t.Fatalf("loop %s completed without its list of results", name)
			}
		}
		// From zero equals incremental.
		scratch := domain.NewState("x")
		for _, ev := range log {
			require.NoError(t, domain.Apply(scratch, ev))
		}
		if !proto.Equal(scratch, st) {
			t.Fatalf("fold from zero differs from the incremental state")
		}
		// From a snapshot equals from zero.
		cut := rapid.IntRange(0, len(log)).Draw(t, "snapshot")
		snap := domain.NewState("x")
		for _, ev := range log[:cut] {
			require.NoError(t, domain.Apply(snap, ev))
		}
		raw, err := proto.Marshal(snap)
		require.NoError(t, err)
		restored := &sbv1.ExecutionState{}
		require.NoError(t, proto.Unmarshal(raw, restored))
		for _, ev := range log[cut:] {
			require.NoError(t, domain.Apply(restored, ev))
		}
		if !proto.Equal(restored, st) {
			t.Fatalf("fold from a snapshot at seq %d differs from the fold from zero", cut)
		}
	})
}

func jsonInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(parts, ",") + "]"
}
