package playbook

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../conformance/playbooks/*.yaml")
	for _, file := range files {
		if src, err := os.ReadFile(file); err == nil {
			f.Add(src)
		}
	}
	f.Add(doc("workflow:\n  - step: start\n    tool: {kind: noop}\n    next: [a, {step: b, when: '{{ x }}'}]\n"))
	f.Add([]byte("a: &a [1]\nb: *a\n"))
	f.Add([]byte("{{{{"))
	f.Fuzz(func(t *testing.T, src []byte) {
		pb, err := Parse(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *Error: %v", err, err)
			}
			if pb != nil {
				t.Fatal("non-nil playbook with an error")
			}
			return
		}
		if pb.Step("start") == nil {
			t.Fatal("parsed playbook without a start step")
		}
		for _, s := range pb.Steps {
			if pb.Step(s.Name) != s {
				t.Fatalf("index does not hold step %q", s.Name)
			}
		}
	})
}
