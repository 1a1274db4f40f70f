package resultstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/resultstore"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := resultstore.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(resultstore.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_FLIGHT_TICKET_TTL":  configtest.Positive,
		"NOETL_RESULT_SWEEP_EVERY": configtest.NonNegative,
		"NOETL_RESULT_TTL":         configtest.NonNegative,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_RESULT_TTL", "7d", `NOETL_RESULT_TTL="7d": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`},
		{"NOETL_FLIGHT_TICKET_TTL", "0s", `NOETL_FLIGHT_TICKET_TTL="0s": must be positive`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := resultstore.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := resultstore.ParseFlags([]string{"--sweep-every=-1m"})
	require.EqualError(t, err, `--sweep-every="-1m": must not be negative`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_RESULT_TTL", "0")
	cfg, printed, err := resultstore.ParseFlags([]string{"--ticket-ttl=10m"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, time.Duration(0), cfg.ResultTTL)
	require.Equal(t, 10*time.Minute, cfg.TicketTTL)
}
