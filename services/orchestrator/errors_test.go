package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/noetl/noetl/internal/platform/app"
)

// TestEveryOrchestratorSentinelMapsToItsCodeForUnaryAndStreamingCalls walks errorCodes: each
// sentinel, wrapped in a handler's words, reaches a client with its code and those words,
// from a unary call and from a streaming one alike; an error outside the table is Internal
// and masked.
func TestEveryOrchestratorSentinelMapsToItsCodeForUnaryAndStreamingCalls(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, errorCodes)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := app.NewServer("test", slog.New(slog.DiscardHandler), lis, nil)
	srv.MapErrors(errorCodes...)
	// current holds the error both methods return; calls are made one at a time.
	var current atomic.Pointer[error]
	srv.GRPC.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Failing",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(&emptypb.Empty{}); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return nil, *current.Load() }
			if in == nil {
				return h(ctx, nil)
			}
			return in(ctx, &emptypb.Empty{}, &grpc.UnaryServerInfo{FullMethod: "/test.Failing/Unary"}, h)
		}}},
		Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, Handler: func(any, grpc.ServerStream) error { return *current.Load() }}},
	}, struct{}{})
	go func() { _ = srv.GRPC.Serve(lis) }()
	t.Cleanup(srv.GRPC.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	unary := func(ctx context.Context) error {
		return conn.Invoke(ctx, "/test.Failing/Unary", &emptypb.Empty{}, &emptypb.Empty{})
	}
	stream := func(ctx context.Context) error {
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Failing/Stream")
		if err != nil {
			return err
		}
		if err := s.SendMsg(&emptypb.Empty{}); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(&emptypb.Empty{})
	}
	check := func(wrapped error, code codes.Code, msg string) {
		t.Helper()
		current.Store(&wrapped)
		for kind, call := range map[string]func(context.Context) error{"unary": unary, "stream": stream} {
			err := call(context.Background())
			require.Equal(t, code, status.Code(err), "%s: %v", kind, wrapped)
			require.Equal(t, msg, status.Convert(err).Message(), "%s: %v", kind, wrapped)
		}
	}
	for _, s := range errorCodes {
		wrapped := fmt.Errorf("thing %q: %w", "x", s.Err)
		check(wrapped, s.Code, wrapped.Error())
	}
	check(errors.New("dial 10.0.0.7:5432: no route"), codes.Internal, "internal error")
}
