package orchestrator_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/orchestrator"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := orchestrator.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(orchestrator.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_ORCHESTRATOR_MAX_WATCHES": configtest.Positive,
		"NOETL_MAX_STEP_ENTRIES":         configtest.Positive,
		"NOETL_MAX_EVENTS":               configtest.Positive,
		"NOETL_ORCHESTRATOR_SHARDS":      configtest.Positive,
		"NOETL_PARTITIONS":               configtest.Positive,
		"NOETL_RECONCILE_EVERY":          configtest.Positive,
		"NOETL_RETENTION":                configtest.Any, // at least 24h, checked below
		"NOETL_SCHEDULE_EVERY":           configtest.Positive,
		"NOETL_STALE_AFTER":              configtest.Positive,
		"NOETL_START_TIMEOUT":            configtest.Positive,
		"NOETL_STREAM_REPLICAS":          configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_STALE_AFTER", "soon", `NOETL_STALE_AFTER="soon": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`},
		{"NOETL_PARTITIONS", "0", `NOETL_PARTITIONS="0": must be positive`},
		{"NOETL_SCHEDULE_EVERY", "0s", `NOETL_SCHEDULE_EVERY="0s": must be positive`},
		{"NOETL_RETENTION", "1h", `NOETL_RETENTION="1h": retention 1h0m0s is shorter than the minimum of 24h0m0s`},
		{"NOETL_TENANT_RETENTION", `{"acme": "2h"}`, `NOETL_TENANT_RETENTION="{\"acme\": \"2h\"}": tenant "acme": retention 2h0m0s is shorter than the minimum of 24h0m0s`},
		{"NOETL_TENANT_RETENTION", `{"acme": 7}`, `NOETL_TENANT_RETENTION="{\"acme\": 7}": not a JSON object of tenant to duration ({"acme": "168h"}): json: cannot unmarshal number into Go value of type string`},
		{"NOETL_TENANT_LIMITS", `{"acme": {"max_events": 0}}`, `NOETL_TENANT_LIMITS="{\"acme\": {\"max_events\": 0}}": tenant "acme": max_events must be a positive integer, not 0`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := orchestrator.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := orchestrator.ParseFlags([]string{"--reconcile-every=often"})
	require.EqualError(t, err, `--reconcile-every="often": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_STALE_AFTER", "2m")
	cfg, printed, err := orchestrator.ParseFlags([]string{"--shards=4"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, 2*time.Minute, cfg.StaleAfter)
	require.Equal(t, 4, cfg.Shards)
	require.Equal(t, 10_000, cfg.MaxStepEntries, "the default")
	require.Equal(t, 1_000_000, cfg.MaxEvents, "the default")

	t.Setenv("NOETL_TENANT_LIMITS", `{"acme": {"max_step_entries": 20}}`)
	cfg, _, err = orchestrator.ParseFlags([]string{"--max-events=5000"})
	require.NoError(t, err)
	require.Equal(t, 5000, cfg.MaxEvents)
	require.Equal(t, `{"acme": {"max_step_entries": 20}}`, cfg.TenantLimits)
}
