package tools

import (
	"context"
	"maps"
	"slices"
)

// SystemInfo (kind system_info) reports the worker that ran it: a privileged tool of the
// system pool.
type SystemInfo struct {
	// Pool and Worker name the worker's pool and id.
	Pool, Worker string
	// Tools is the worker's tool table, whose kinds the result lists.
	Tools *Registry
}

// Run implements Tool.
func (s SystemInfo) Run(context.Context, *Call) (any, error) {
	kinds := []string{}
	if s.Tools != nil {
		kinds = slices.Sorted(maps.Keys(*s.Tools))
	}
	return map[string]any{"pool": s.Pool, "worker": s.Worker, "tools": kinds}, nil
}
