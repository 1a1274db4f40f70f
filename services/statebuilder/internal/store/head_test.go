package store

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/testkit"
)

// GetExecutionHead reads an execution's row: found with its tenant, status and last seq;
// not found when it never was, when it is another tenant's, or once retention purged it.
func TestExecutionHeadFoundNotFoundOtherTenantAndPurged(t *testing.T) {
	t.Parallel()
	s := newStore(t, testkit.StartMigratedPostgres(t), Options{})
	ctx := context.Background()
	insert(t, s, "h", 1, 2, 3)
	_, err := s.db.Exec(ctx, `UPDATE noetl.execution SET last_seq = 3 WHERE execution_id = 'h'`)
	require.NoError(t, err)

	head, err := s.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h", Tenant: "t"})
	require.NoError(t, err)
	require.Equal(t, "t", head.GetTenant())
	require.Equal(t, int64(3), head.GetLastSeq())
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, head.GetStatus())
	head, err = s.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h"})
	require.NoError(t, err, "an internal caller acts for every tenant")
	require.Equal(t, "t", head.GetTenant())
	require.Zero(t, s.lru.Len(), "the head is read without folding the log")

	_, err = s.db.Exec(ctx, `UPDATE noetl.execution SET status = 2, last_seq = 4 WHERE execution_id = 'h'`)
	require.NoError(t, err)
	head, err = s.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h"})
	require.NoError(t, err)
	require.Equal(t, eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, head.GetStatus())
	require.Equal(t, int64(4), head.GetLastSeq())

	for name, req := range map[string]*sbv1.GetExecutionHeadRequest{
		"never started":   {ExecutionId: "nope"},
		"another tenant":  {ExecutionId: "h", Tenant: "other"},
		"never committed": {ExecutionId: "empty"},
	} {
		if name == "never committed" {
			_, err := s.db.Exec(ctx, `INSERT INTO noetl.execution (execution_id, tenant) VALUES ('empty', 't')`)
			require.NoError(t, err)
		}
		_, err := s.GetExecutionHead(ctx, req)
		require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", name, err)
	}
	_, err = s.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.ErrorContains(t, err, "execution_id")

	// Retention deletes the row (and the events) in one transaction.
	_, err = s.db.Exec(ctx, `DELETE FROM noetl.event WHERE execution_id = 'h'`)
	require.NoError(t, err)
	_, err = s.db.Exec(ctx, `DELETE FROM noetl.execution WHERE execution_id = 'h'`)
	require.NoError(t, err)
	_, err = s.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h", Tenant: "t"})
	require.Equal(t, codes.NotFound, status.Code(err), "purged: %v", err)
}

// Over gRPC, GetExecutionHead needs a signed principal like every statebuilder RPC, and a
// user principal is held to its own tenant whatever tenant it names.
func TestExecutionHeadIsScopedToTheCallersTenant(t *testing.T) {
	t.Parallel()
	s := newStore(t, testkit.StartMigratedPostgres(t), Options{})
	insert(t, s, "h", 1)
	_, err := s.db.Exec(context.Background(), `UPDATE noetl.execution SET last_seq = 1 WHERE execution_id = 'h'`)
	require.NoError(t, err)
	trust, err := auth.NewTrust("0123456789abcdef0123456789abcdef-head-test")
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(auth.ServerOptions(trust)...)
	sbv1.RegisterStateServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	client := func(creds grpc.DialOption) sbv1.StateServiceClient {
		conn, err := grpcx.Dial(lis.Addr().String(), creds)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return sbv1.NewStateServiceClient(conn)
	}
	ctx := context.Background()
	_, err = client(grpc.EmptyDialOption{}).GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h"})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "unsigned: %v", err)

	svc := client(grpc.WithPerRPCCredentials(trust.Service("orchestrator")))
	head, err := svc.GetExecutionHead(ctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h"})
	require.NoError(t, err)
	require.Equal(t, "t", head.GetTenant())

	user := client(grpc.WithPerRPCCredentials(trust.Forward("gateway")))
	for tenant, want := range map[string]codes.Code{"t": codes.OK, "u": codes.NotFound} {
		uctx := auth.NewContext(ctx, &auth.Principal{Tenant: tenant, Subject: "apikey:k", Roles: []string{auth.RoleAdmin}})
		_, err := user.GetExecutionHead(uctx, &sbv1.GetExecutionHeadRequest{ExecutionId: "h", Tenant: "t"})
		require.Equal(t, want, status.Code(err), "a user of tenant %q naming tenant t: %v", tenant, err)
	}
}
