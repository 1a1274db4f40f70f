package consume

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// cancels routes the materializer's cancellation announcements (noetl.cancel.<execution>)
// to the commands this worker runs for that execution. One subscription serves every
// command, instead of a subscribe and an unsubscribe per command on the step's path.
type cancels struct {
	mu      sync.Mutex
	running map[string]map[*context.CancelCauseFunc]struct{}
}

func newCancels() *cancels {
	return &cancels{running: map[string]map[*context.CancelCauseFunc]struct{}{}}
}

// subscribe starts routing announcements; the returned func stops it.
func (c *cancels) subscribe(nc *nats.Conn) (func(), error) {
	sub, err := nc.Subscribe(natsx.CancelAll, func(m *nats.Msg) { c.cancel(natsx.CancelledExecution(m.Subject)) })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// watch makes a cancellation of executionID cancel ctx's command with
// tools.ErrExecutionCancelled until the returned func is called.
func (c *cancels) watch(executionID string, cancel context.CancelCauseFunc) func() {
	k := &cancel
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.running[executionID]
	if set == nil {
		set = map[*context.CancelCauseFunc]struct{}{}
		c.running[executionID] = set
	}
	set[k] = struct{}{}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(set, k)
		if len(set) == 0 {
			delete(c.running, executionID)
		}
	}
}

// cancel stops every running command of an execution.
func (c *cancels) cancel(executionID string) {
	c.mu.Lock()
	fs := make([]context.CancelCauseFunc, 0, len(c.running[executionID]))
	for k := range c.running[executionID] {
		fs = append(fs, *k)
	}
	c.mu.Unlock()
	for _, f := range fs {
		f(tools.ErrExecutionCancelled)
	}
}
