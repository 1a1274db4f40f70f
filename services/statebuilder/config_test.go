package statebuilder_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/statebuilder"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := statebuilder.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(statebuilder.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_STATEBUILDER_CACHE":          configtest.Positive,
		"NOETL_STATEBUILDER_CACHE_BYTES":    configtest.Positive,
		"NOETL_STATEBUILDER_COUNT_EVERY":    configtest.Positive,
		"NOETL_STATEBUILDER_SNAPSHOT_EVERY": configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_STATEBUILDER_CACHE_BYTES", "256MiB", `NOETL_STATEBUILDER_CACHE_BYTES="256MiB": invalid integer`},
		{"NOETL_STATEBUILDER_CACHE", "-10", `NOETL_STATEBUILDER_CACHE="-10": must be positive`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := statebuilder.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := statebuilder.ParseFlags([]string{"--count-every=0s"})
	require.EqualError(t, err, `--count-every="0s": must be positive`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_STATEBUILDER_CACHE", "50")
	cfg, printed, err := statebuilder.ParseFlags([]string{"--snapshot-every=10"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, 50, cfg.CacheEntries)
	require.Equal(t, 10, cfg.SnapshotEvery)
}
