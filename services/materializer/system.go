package materializer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/sysop"
	"github.com/noetl/noetl/services/materializer/internal/writer"
)

// system executes the privileged requests of the system_* tools (package sysop): the
// purge of terminal executions' logs, which only the materializer, the log's sole writer,
// may run (through noetl.purge_executions, migration 00015), and the cleanup of its own
// dead lease rows. Each answer is sent after its transaction committed.
type system struct {
	w *writer.Writer
	// clean is lease.Cleanup on the materializer's database.
	clean func(ctx context.Context, grace time.Duration) (replicas, leases int64, err error)
	log   *slog.Logger
}

// handle implements sysop.Handler.
func (s *system) handle(ctx context.Context, p *auth.Principal, op string, body []byte) (any, error) {
	switch op {
	case sysop.OpPurge:
		var req sysop.PurgeRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("purge request: %w", err)
		}
		if !p.Service {
			// A tenant's own retention purges its own tenant only.
			req.Tenant = p.Tenant
		}
		resp, err := s.w.Purge(ctx, req)
		if err == nil && len(resp.Executions) > 0 {
			s.log.Info("executions purged", slog.Int("executions", len(resp.Executions)), slog.String("tenant", req.Tenant), slog.String("by", p.Subject))
		}
		return resp, err
	case sysop.OpCleanup:
		var req sysop.CleanupRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("cleanup request: %w", err)
		}
		if !p.Service {
			return nil, fmt.Errorf("cleanup: %s may not clean the materializer's rows (a service principal is required)", p.Subject)
		}
		return s.cleanup(ctx, req)
	}
	return nil, fmt.Errorf("unknown operation %q", op)
}

// cleanup removes the materializer's own dead rows (lease.Cleanup).
func (s *system) cleanup(ctx context.Context, req sysop.CleanupRequest) (*sysop.CleanupResponse, error) {
	if req.GraceMS < 0 {
		return nil, fmt.Errorf("cleanup: grace_ms must not be negative, not %d", req.GraceMS)
	}
	replicas, leases, err := s.clean(ctx, time.Duration(req.GraceMS)*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("cleanup: %w", err)
	}
	return &sysop.CleanupResponse{Replicas: replicas, Leases: leases}, nil
}
