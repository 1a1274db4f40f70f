// Package tools holds the tool implementations the worker runs: noop and python (a
// python3 subprocess) for now; more kinds plug in through Registry.
package tools

import (
	"context"
	"errors"
	"fmt"
)

// Call is one rendered tool invocation.
type Call struct {
	Kind      string
	Config    map[string]any // rendered tool configuration
	Input     map[string]any // rendered step input merged with the tool's own input
	CommandID string
	Step      string
	// Tenant, ExecutionID and PlaybookPath are the command's: who the call acts for.
	Tenant, ExecutionID, PlaybookPath string
	// Log receives what the call writes (a process's stdout and stderr, the tool's
	// diagnostic lines) for the step's logs; nil discards it.
	Log *Log
}

// Tool runs one kind of tool.
type Tool interface {
	Run(ctx context.Context, c *Call) (any, error)
}

// Error is a tool failure with a retryable flag.
type Error struct {
	Msg       string
	Retryable bool
}

func (e *Error) Error() string { return e.Msg }

// Registry maps kinds to tools.
type Registry map[string]Tool

// ErrUnknownKind is returned for a kind with no implementation in this worker.
var ErrUnknownKind = errors.New("unknown tool kind")

// ErrExecutionCancelled is the cause (context.Cause) of a tool's context when its
// execution was cancelled; any other end of the context is the worker stopping, after
// which the command runs again elsewhere.
var ErrExecutionCancelled = errors.New("the execution was cancelled")

// Run dispatches a call.
func (r Registry) Run(ctx context.Context, c *Call) (any, error) {
	t, ok := r[c.Kind]
	if !ok {
		return nil, fmt.Errorf("%w %q (this worker runs: %v)", ErrUnknownKind, c.Kind, r.kinds())
	}
	return t.Run(ctx, c)
}

func (r Registry) kinds() []string {
	var ks []string
	for k := range r {
		ks = append(ks, k)
	}
	return ks
}

// Noop returns config.result when present, else null.
type Noop struct{}

// Run implements Tool.
func (Noop) Run(_ context.Context, c *Call) (any, error) {
	if v, ok := c.Config["result"]; ok {
		return v, nil
	}
	return nil, nil
}
