package executions

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/testkit"
)

// heads answers every head read as found (the start is in the log) or not found.
type heads struct {
	sbv1.StateServiceClient
	found bool
}

func (h heads) GetExecutionHead(_ context.Context, req *sbv1.GetExecutionHeadRequest, _ ...grpc.CallOption) (*sbv1.GetExecutionHeadResponse, error) {
	if !h.found {
		return nil, status.Errorf(codes.NotFound, "execution %s not found", req.GetExecutionId())
	}
	return &sbv1.GetExecutionHeadResponse{Tenant: req.GetTenant(), LastSeq: 1}, nil
}

// A start whose commit notice never reaches it (a plain subscription can miss a message)
// asks the log before it gives up: a start the log holds succeeds, one it does not hold is
// Unavailable, naming the execution.
func TestStartThatHearsNoNoticeAsksTheLog(t *testing.T) {
	nc, js := testkit.StartJetStream(t)
	tooLarge := func() error { return status.Error(codes.ResourceExhausted, "too large") }
	for _, found := range []bool{true, false} {
		// No materializer runs: the start is published, and nothing commits or announces it.
		s := &Service{NC: nc, JS: js, Partitions: 16, State: heads{found: found}, StartTimeout: 50 * time.Millisecond}
		id, existing, err := s.publishStart(context.Background(), "t", "", "", []byte(`{"path":"p","version":1}`), tooLarge, nil)
		if found {
			require.NoError(t, err)
			require.NotEmpty(t, id)
			require.False(t, existing)
			continue
		}
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "was published but its start was not committed")
	}
}
