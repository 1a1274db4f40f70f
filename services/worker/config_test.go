package worker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/worker"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := worker.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(worker.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_INLINE_RESULT_MAX_BYTES": configtest.Positive,
		"NOETL_PARTITIONS":              configtest.Positive,
		"NOETL_STREAM_REPLICAS":         configtest.Positive,
		"NOETL_WORKER_CONCURRENCY":      configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_WORKER_CONCURRENCY", "8x", `NOETL_WORKER_CONCURRENCY="8x": invalid integer`},
		{"NOETL_WORKER_CONCURRENCY", "-4", `NOETL_WORKER_CONCURRENCY="-4": must be positive`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := worker.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := worker.ParseFlags([]string{"--concurrency=8x"})
	require.EqualError(t, err, `--concurrency="8x": invalid integer`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_WORKER_CONCURRENCY", "8")
	cfg, printed, err := worker.ParseFlags([]string{"--stream-replicas=3"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, 8, cfg.Concurrency)
	require.Equal(t, 3, cfg.StreamReplicas)
}
