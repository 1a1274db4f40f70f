// Package pdk is the guest side of NoETL's WebAssembly plug-ins: a Go program built with
// GOOS=wasip1 GOARCH=wasm calls these functions, which wrap the host functions of the
// worker's import module "noetl" (docs/plugins.md describes the ABI). Built for any other
// target the functions return ErrNoHost, so a plug-in's logic can be unit-tested natively.
//
// A plug-in's main is usually one call:
//
//	func main() { pdk.Run(func(in map[string]any) (any, error) { return in, nil }) }
package pdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Status codes of the host functions.
const (
	statusNotFound int32 = -1
	statusDenied   int32 = -2
	statusFailed   int32 = -3
)

// ErrNoHost is returned outside a NoETL worker (a native build).
var ErrNoHost = errors.New("pdk: not running in a NoETL worker")

// ErrDenied is returned for a capability the module's class is not granted.
var ErrDenied = errors.New("pdk: capability denied")

// Levels of Log.
const (
	LevelDebug = 0
	LevelInfo  = 1
	LevelWarn  = 2
	LevelError = 3
)

// hostError turns a negative status into an error carrying the host's message.
func hostError(fn string, status int32) error {
	msg := string(takeReply())
	switch status {
	case statusDenied:
		return fmt.Errorf("%w: %s: %s", ErrDenied, fn, msg)
	case statusFailed:
		return fmt.Errorf("pdk: %s: %s", fn, msg)
	}
	return fmt.Errorf("pdk: %s: status %d", fn, status)
}

// InputJSON returns the step's input as JSON.
func InputJSON() ([]byte, error) {
	n := hostInput()
	if n < 0 {
		return nil, hostError("input", n)
	}
	return replyOf(n), nil
}

// Input decodes the step's input into v.
func Input(v any) error {
	b, err := InputJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Output sets the step's result to v as JSON (the last call wins).
func Output(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if st := hostOutput(b); st < 0 {
		return hostError("output", st)
	}
	return nil
}

// Fail makes the step fail with msg.
func Fail(msg string) { hostFail([]byte(msg)) }

// Log writes a line to the step's log at level.
func Log(level int, format string, a ...any) {
	hostLog(uint32(level), []byte(fmt.Sprintf(format, a...)))
}

// HTTP sends a request through the worker's http tool, with its egress policy: req holds
// the keys of an http step's tool (method, url, headers, params, body, timeout, auth), and
// the response is what such a step returns (status_code, headers, body, ...).
func HTTP(req map[string]any) (map[string]any, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	n := hostHTTP(b)
	if n < 0 {
		return nil, hostError("http", n)
	}
	var out map[string]any
	if err := json.Unmarshal(replyOf(n), &out); err != nil {
		return nil, fmt.Errorf("pdk: http: %w", err)
	}
	return out, nil
}

// KVGet reads key from the tenant's key-value bucket; found is false for a missing key.
func KVGet(key string) (value []byte, found bool, err error) {
	n := hostKVGet([]byte(key))
	if n == statusNotFound {
		takeReply()
		return nil, false, nil
	}
	if n < 0 {
		return nil, false, hostError("kv_get", n)
	}
	return replyOf(n), true, nil
}

// KVPut writes key in the tenant's key-value bucket.
func KVPut(key string, value []byte) error {
	if st := hostKVPut([]byte(key), value); st < 0 {
		return hostError("kv_put", st)
	}
	return nil
}

// Result reads a stored result by its reference (a step's _ref.uri) as JSON.
func Result(ref string) (json.RawMessage, error) {
	n := hostResult([]byte(ref))
	if n < 0 {
		return nil, hostError("result", n)
	}
	return replyOf(n), nil
}

// WorkerInfo describes the worker running the call (pool, worker, tenant): a capability
// of system modules only.
func WorkerInfo() (map[string]any, error) {
	n := hostWorkerInfo()
	if n < 0 {
		return nil, hostError("worker_info", n)
	}
	var out map[string]any
	if err := json.Unmarshal(replyOf(n), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// replyOf reads the host's reply buffer of n bytes.
func replyOf(n int32) []byte {
	buf := make([]byte, n)
	if n > 0 {
		hostReply(buf)
	}
	return buf
}

// takeReply reads whatever the reply buffer holds (a message after a failure).
func takeReply() []byte {
	buf := make([]byte, 4<<10)
	n := hostReply(buf)
	if n <= 0 {
		return nil
	}
	return buf[:n]
}

// Run reads the input as a JSON object, calls f and writes its result as the output; an
// error from f (or from reading the input) fails the step with its message.
func Run(f func(in map[string]any) (any, error)) {
	var in map[string]any
	if err := Input(&in); err != nil {
		Fail(err.Error())
		os.Exit(1)
	}
	out, err := f(in)
	if err != nil {
		Fail(err.Error())
		os.Exit(1)
	}
	if err := Output(out); err != nil {
		Fail(err.Error())
		os.Exit(1)
	}
}
