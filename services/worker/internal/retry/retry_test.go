package retry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unavailable is the resultstore's rule, as package results has it: an Unavailable
// answer is worth another attempt, any other is not.
func unavailable(err error) bool { return status.Code(err) == codes.Unavailable }

// Do makes the first attempt at once, retries only what retry accepts, notifies each
// retry, and gives up at its bound with the last failure.
func TestDoAttemptsAndNotifies(t *testing.T) {
	t.Parallel()
	down := status.Error(codes.Unavailable, "resultstore restarting")
	refused := status.Error(codes.InvalidArgument, "bad result id")
	for _, tc := range []struct {
		name     string
		outcomes []error // of each attempt; the last repeats
		bound    time.Duration
		calls    int
		notified int
		want     error
	}{
		{"first attempt succeeds", []error{nil}, time.Minute, 1, 0, nil},
		{"first attempt refused", []error{refused}, time.Minute, 1, 0, refused},
		{"unavailable, then stored", []error{down, down, nil}, time.Minute, 3, 2, nil},
		{"unavailable, then refused", []error{down, refused}, time.Minute, 2, 1, refused},
		{"unavailable past the bound", []error{down}, 2 * time.Second, 0, 0, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				calls, notified := 0, 0
				v, err := Do(context.Background(), tc.bound, unavailable, func(error, time.Duration) { notified++ }, func() (int, error) {
					err := tc.outcomes[min(calls, len(tc.outcomes)-1)]
					calls++
					if err != nil {
						return 0, err
					}
					return 42, nil
				})
				if tc.want == nil {
					require.NoError(t, err)
					require.Equal(t, 42, v)
				} else {
					require.True(t, errors.Is(err, tc.want), "%v", err)
				}
				if tc.calls > 0 {
					require.Equal(t, tc.calls, calls)
					require.Equal(t, tc.notified, notified)
				} else {
					require.Greater(t, calls, 1, "retried within the bound")
					require.Equal(t, calls-1, notified, "each retry is notified")
				}
			})
		})
	}
}
