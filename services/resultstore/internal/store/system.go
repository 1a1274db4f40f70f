package store

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	"github.com/noetl/noetl/internal/platform/auth"
)

// Bounds of the system calls.
const (
	maxPurgeExecutions = 1000
	defaultCleanup     = 10000
)

// PurgeResults implements ResultStoreService: retention deletes a purged execution's
// results through their owner.
func (s *Store) PurgeResults(ctx context.Context, req *rsv1.PurgeResultsRequest) (*rsv1.PurgeResultsResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	if req.GetTenant() == "" {
		return nil, status.Error(codes.InvalidArgument, "tenant: required")
	}
	if n := len(req.GetExecutionIds()); n > maxPurgeExecutions {
		return nil, status.Errorf(codes.InvalidArgument, "execution_ids: %d exceeds the limit of %d", n, maxPurgeExecutions)
	}
	if len(req.GetExecutionIds()) == 0 {
		return &rsv1.PurgeResultsResponse{}, nil
	}
	results, chunks, err := s.Backend.Purge(ctx, req.GetTenant(), req.GetExecutionIds())
	if err != nil {
		return nil, err
	}
	return &rsv1.PurgeResultsResponse{Results: results, Chunks: chunks}, nil
}

// CleanupResults implements ResultStoreService: results past their expiry (what the
// sweeper deletes on its own, counted here) and chunks whose result is gone.
func (s *Store) CleanupResults(ctx context.Context, req *rsv1.CleanupResultsRequest) (*rsv1.CleanupResultsResponse, error) {
	if err := auth.RequireService(ctx); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 {
		limit = defaultCleanup
	}
	expired, err := s.Sweep(ctx, limit)
	if err != nil {
		return nil, err
	}
	orphans, err := s.Backend.SweepOrphanChunks(ctx, limit)
	if err != nil {
		return nil, err
	}
	return &rsv1.CleanupResultsResponse{Expired: expired, OrphanChunks: orphans}, nil
}
