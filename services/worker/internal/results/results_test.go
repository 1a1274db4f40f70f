package results

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, "connection refused"), true},
		{fmt.Errorf("put: %w", status.Error(codes.Unavailable, "x")), true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{status.Error(codes.InvalidArgument, "x"), false},
		{status.Error(codes.PermissionDenied, "x"), false},
		{status.Error(codes.NotFound, "x"), false},
		{errors.New("result is not JSON-encodable"), false},
	} {
		require.Equal(t, tc.want, unavailable(tc.err), "%v", tc.err)
	}
}
