package playbook

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIgnoredKeysWarn: each key the engine does not act on registers with a warning that
// names it and its line, and the keys it reads register without one.
func TestIgnoredKeysWarn(t *testing.T) {
	pb, err := Parse([]byte(`apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: w, path: tests/w}
spec: {timeout: 60, mode: strict}
executor: {spec: {policy: {limits: {max_events: 100}}}}
workflow:
  - step: start
    spec: {timeout: 5s, retries: 3}
    output: {output_select: [a], store: kv}
    vars: {x: 1}
    tool:
      kind: noop
      output: {store: kv}
      spec: {timeout: 3, policy: {rules: [{else: {then: {do: continue}}}]}}
    next: end
  - step: end
`))
	require.NoError(t, err)
	var got []string
	for _, w := range pb.Warnings {
		got = append(got, w.Step+": "+w.Msg)
		require.NotZero(t, w.Line, w.Msg)
	}
	require.ElementsMatch(t, []string{
		`: "spec.mode" is not read by this engine; it is ignored`,
		`start: "spec.retries" is not read by this engine; it is ignored`,
		`start: "output.store" is not read by this engine; it is ignored`,
		`start: "vars" is not read by this engine; it is ignored`,
		`start: tool.output: storage hints of a tool are ignored (a step's output.output_select is read)`,
		`start: "tool.spec.timeout" is not read by this engine; it is ignored`,
	}, got)
}
