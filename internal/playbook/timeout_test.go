package playbook

import (
	"strings"
	"testing"
	"time"
)

func TestStepTimeout(t *testing.T) {
	doc := func(timeout string) []byte {
		return []byte("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\nworkflow:\n  - step: start\n    spec: {timeout: " + timeout + "}\n    tool: {kind: noop}\n")
	}
	for text, want := range map[string]time.Duration{"30": 30 * time.Second, "2.5": 2500 * time.Millisecond, "90s": 90 * time.Second, `"1h30m"`: 90 * time.Minute} {
		pb, err := Parse(doc(text))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if got := pb.Step("start").Timeout; got != want {
			t.Errorf("spec.timeout %s = %s, want %s", text, got, want)
		}
	}
	for text, msg := range map[string]string{
		"0":      `line 6, column 21: step "start": field "spec.timeout": must be positive and at most 24h0m0s, not "0"`,
		"-5s":    `must be positive`,
		"25h":    `at most 24h0m0s`,
		"soon":   `must be a number of seconds or a duration such as 90s, not "soon"`,
		"[1, 2]": `not a list`,
	} {
		_, err := Parse(doc(text))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("spec.timeout %s: err = %v, want it to contain %q", text, err, msg)
		}
	}
}
