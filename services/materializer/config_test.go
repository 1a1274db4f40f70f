package materializer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/materializer"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := materializer.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(materializer.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_MATERIALIZER_BATCH":       configtest.Positive,
		"NOETL_MATERIALIZER_COMMITTERS":  configtest.Positive,
		"NOETL_MATERIALIZER_LEASE_TTL":   configtest.Positive,
		"NOETL_MATERIALIZER_MAX_LAG":     configtest.Positive,
		"NOETL_MATERIALIZER_STALL_AFTER": configtest.Positive,
		"NOETL_PARTITIONS":               configtest.Positive,
		"NOETL_STREAM_REPLICAS":          configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_MATERIALIZER_LEASE_TTL", "15", `NOETL_MATERIALIZER_LEASE_TTL="15": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`},
		{"NOETL_MATERIALIZER_BATCH", "0", `NOETL_MATERIALIZER_BATCH="0": must be positive`},
		{"NOETL_MATERIALIZER_COMMITTERS", "17", `NOETL_MATERIALIZER_COMMITTERS="17": must be at most 16`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := materializer.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := materializer.ParseFlags([]string{"--max-lag=-1"})
	require.EqualError(t, err, `--max-lag="-1": must be positive`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_MATERIALIZER_BATCH", "512")
	cfg, printed, err := materializer.ParseFlags([]string{"--stall-after=90s"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, 512, cfg.BatchSize)
	require.Equal(t, 90*time.Second, cfg.StallAfter)
}
