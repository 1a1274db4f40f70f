package tools

import (
	"context"
	"errors"
	"math"
	"os/exec"
	"strings"
	"testing"
)

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
}

// TestPythonStreamsAnInputLargerThanAPipe gives the interpreter an input much larger than
// a pipe's buffer, streamed to its stdin as it reads.
func TestPythonStreamsAnInputLargerThanAPipe(t *testing.T) {
	needPython(t)
	blob := strings.Repeat("é<x>", 1<<18) // 1.25 MB of JSON text with escapes
	out, err := (&Python{}).Run(context.Background(), &Call{
		Config: map[string]any{"code": `result = {"len": len(doc["blob"]), "ok": doc["blob"] == "é<x>" * (1 << 18)}`},
		Input:  map[string]any{"doc": map[string]any{"blob": blob}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := out.(map[string]any)
	if got["len"] != float64(4<<18) || got["ok"] != true {
		t.Fatalf("result %v", got)
	}
}

// TestPythonInputNotEncodable fails with a clear error when the input has no JSON form.
func TestPythonInputNotEncodable(t *testing.T) {
	needPython(t)
	_, err := (&Python{}).Run(context.Background(), &Call{
		Config: map[string]any{"code": "result = 1"},
		Input:  map[string]any{"x": math.NaN()},
	})
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "input is not JSON-encodable") {
		t.Fatalf("error %v", err)
	}
}

// TestPythonInterpreterThatReadsNoInput ends (without a result) when the interpreter exits
// before reading a large input: the encoder feeding its stdin is released.
func TestPythonInterpreterThatReadsNoInput(t *testing.T) {
	if _, err := exec.LookPath("true"); err != nil {
		t.Skip("true not found")
	}
	_, err := (&Python{Interpreter: "true"}).Run(context.Background(), &Call{
		Config: map[string]any{"code": "result = 1"},
		Input:  map[string]any{"blob": strings.Repeat("x", 4<<20)},
	})
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "no result written") {
		t.Fatalf("error %v", err)
	}
}
