package playbook

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cycleWarnings returns the cycle warnings of a parsed playbook as "step: message".
func cycleWarnings(pb *Playbook) []string {
	var out []string
	for _, w := range pb.Warnings {
		if strings.Contains(w.Msg, "cycle with no exit condition") {
			out = append(out, w.Step+": "+w.Msg)
		}
	}
	return out
}

func TestCycleWithoutExitWarns(t *testing.T) {
	t.Parallel()
	// The probe's playbook: start -> a, a -> b, b -> a.
	pb := mustParse(t, doc(`workflow:
  - step: start
    next: a
  - step: a
    next: b
  - step: b
    next: a
`))
	w := cycleWarnings(pb)
	require.Len(t, w, 1, "%v", pb.Warnings)
	require.Equal(t, `a: cycle with no exit condition: steps "a", "b" route only to each other and no arc between them has a when, so an execution that enters them runs until one of them reaches its limit of entries (max_step_entries)`, w[0])
	require.Equal(t, pb.Step("a").Line, pb.Warnings[0].Line)
}

func TestCycleWarningCases(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		workflow string
		want     []string // the first step of each warned cycle
	}{
		{"a step looping on itself", `
  - step: start
    next: start`, []string{"start"}},
		{"pagination: a back-edge with a when", `
  - step: start
    next: page
  - step: page
    tool: {kind: noop}
    next:
      arcs:
        - {step: page, when: "{{ output.more }}"}
        - step: end
  - step: end`, nil},
		{"an exit arc with a when", `
  - step: start
    next: a
  - step: a
    next: [b, {step: end, when: "{{ ctx.done }}"}]
  - step: b
    next: a
  - step: end`, nil},
		{"a when guard on a step of the cycle", `
  - step: start
    next: a
  - step: a
    when: "{{ ctx.go }}"
    next: b
  - step: b
    next: a`, nil},
		{"an exclusive arc after an unconditional one never fires", `
  - step: start
    next: a
  - step: a
    next: {arcs: [{step: b}, {step: end, when: "{{ ctx.done }}"}]}
  - step: b
    next: a
  - step: end`, []string{"a"}},
		{"an inclusive unconditional exit still leaves", `
  - step: start
    next: a
  - step: a
    next: [b, end]
  - step: b
    next: a
  - step: end`, nil},
		{"two closed cycles, named by their first step", `
  - step: start
    next: [x, p]
  - step: p
    next: q
  - step: q
    next: p
  - step: x
    next: x`, []string{"p", "x"}},
		{"a cycle start cannot reach is not warned as a cycle", `
  - step: start
    tool: {kind: noop}
  - step: a
    next: b
  - step: b
    next: a`, nil},
		{"no cycle", `
  - step: start
    next: [a, b]
  - step: a
    next: c
  - step: b
    next: c
  - step: c
    tool: {kind: noop}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pb := mustParse(t, doc("workflow:"+tc.workflow+"\n"))
			var got []string
			for _, w := range pb.Warnings {
				if strings.Contains(w.Msg, "cycle with no exit condition") {
					got = append(got, w.Step)
				}
			}
			require.Equal(t, tc.want, got, "%v", pb.Warnings)
		})
	}
}

func TestCycleDetectionHandlesLongChains(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("workflow:\n")
	const n = MaxSteps
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("s%d", i)
		if i == 0 {
			name = "start"
		}
		next := fmt.Sprintf("s%d", i+1)
		if i == n-1 {
			next = "s1" // close one long cycle
		}
		fmt.Fprintf(&b, "  - {step: %s, next: %s}\n", name, next)
	}
	pb := mustParse(t, doc(b.String()))
	w := cycleWarnings(pb)
	require.Len(t, w, 1)
	require.True(t, strings.HasPrefix(w[0], "s1: "), w[0])
}

func TestLimitsAreParsed(t *testing.T) {
	t.Parallel()
	pb := mustParse(t, doc(`executor:
  profile: auto
  spec:
    policy:
      defaults: {timeout_s: 30}
      limits: {max_step_entries: 50, max_events: 2000}
workflow:
  - step: start
    tool: {kind: noop}
`))
	require.Equal(t, Limits{MaxStepEntries: 50, MaxEvents: 2000}, pb.Limits)

	pb = mustParse(t, doc("workflow:\n  - step: start\n    tool: {kind: noop}\n"))
	require.Equal(t, Limits{}, pb.Limits, "absent: not set")

	pb = mustParse(t, doc("executor: {spec: {policy: {limits: {max_events: 10, max_minutes: 5}}}}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"))
	require.Equal(t, Limits{MaxEvents: 10}, pb.Limits)
	require.Len(t, pb.Warnings, 1)
	require.Equal(t, `field "executor.spec.policy.limits.max_minutes": unknown limit "max_minutes" is ignored (known: max_step_entries, max_events)`, pb.Warnings[0].Msg)

	pb = mustParse(t, doc("executor: auto\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"))
	require.Equal(t, Limits{}, pb.Limits, "an executor that is not a mapping is kept and ignored")
}

func TestBadLimitsAreRegistrationErrors(t *testing.T) {
	t.Parallel()
	for value, want := range map[string]string{
		"{max_step_entries: 0}":              `line 6, column 55: field "executor.spec.policy.limits.max_step_entries": must be a positive integer, not "0"`,
		"{max_step_entries: -3}":             `field "executor.spec.policy.limits.max_step_entries": must be a positive integer, not "-3"`,
		"{max_events: 1.5}":                  `field "executor.spec.policy.limits.max_events": must be a positive integer, not "1.5"`,
		`{max_events: "100"}`:                `field "executor.spec.policy.limits.max_events": must be a positive integer, not "100"`,
		"{max_events: [1]}":                  `field "executor.spec.policy.limits.max_events": must be a positive integer, not a list`,
		"{max_events: 99999999999999999999}": `field "executor.spec.policy.limits.max_events": must be a positive integer, not "99999999999999999999"`,
		"[max_events]":                       `field "executor.spec.policy.limits": must be a mapping, not a list`,
	} {
		_, err := Parse(doc("executor: {spec: {policy: {limits: " + value + "}}}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n"))
		e := firstError(t, err)
		require.Contains(t, e.Error(), want, value)
		require.Equal(t, 6, e.Line, value)
	}
}
