package gateway_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/config/configtest"
	"github.com/noetl/noetl/services/gateway"
)

// A malformed or out-of-range value of any typed setting stops start-up with an error
// naming the variable and the value; it never falls back to the default.
func TestParseFlagsRejectsBadValues(t *testing.T) {
	parse := func() error {
		_, _, err := gateway.ParseFlags(nil)
		return err
	}
	configtest.RejectsBadValues(t, func(fs *config.FlagSet) { new(gateway.Config).Flags(fs) }, parse, map[string]configtest.Check{
		"NOETL_FLIGHT_TICKET_TTL":                configtest.Positive,
		"NOETL_GATEWAY_AUTH_FAILURE_BURST":       configtest.Positive,
		"NOETL_GATEWAY_AUTH_FAILURES_PER_MINUTE": configtest.Positive,
		"NOETL_GATEWAY_IDLE_TIMEOUT":             configtest.Positive,
		"NOETL_GATEWAY_JWKS_REFRESH":             configtest.Positive,
		"NOETL_GATEWAY_JWT_LEEWAY":               configtest.Positive,
		"NOETL_GATEWAY_KEY_CACHE_SIZE":           configtest.Positive,
		"NOETL_GATEWAY_KEY_CACHE_TTL":            configtest.Positive,
		"NOETL_GATEWAY_MAX_BODY":                 configtest.Positive,
		"NOETL_GATEWAY_MAX_CONNS":                configtest.Positive,
		"NOETL_GATEWAY_TENANT_BURST":             configtest.Positive,
		"NOETL_GATEWAY_TENANT_INFLIGHT":          configtest.Positive,
		"NOETL_GATEWAY_TENANT_RPS":               configtest.Positive,
		"NOETL_GATEWAY_TENANT_WAITS":             configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_GATEWAY_INSECURE", "yes", `NOETL_GATEWAY_INSECURE="yes": invalid boolean (want true or false)`},
		{"NOETL_GATEWAY_TENANT_RPS", "-5", `NOETL_GATEWAY_TENANT_RPS="-5": must be positive`},
		{"NOETL_GATEWAY_TRUSTED_PROXIES", "10.0.0.0/8, proxy.local", `NOETL_GATEWAY_TRUSTED_PROXIES="10.0.0.0/8, proxy.local": "proxy.local" is not an IP address or a CIDR prefix`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, printed, err := gateway.ParseFlags([]string{"--print-config"})
			require.EqualError(t, err, tc.want)
			require.False(t, printed)
		})
	}
	_, _, err := gateway.ParseFlags([]string{"--tenant-burst=lots"})
	require.EqualError(t, err, `--tenant-burst="lots": invalid integer`)
}

func TestParseFlags(t *testing.T) {
	t.Setenv("NOETL_GATEWAY_MAX_BODY", "1024")
	cfg, printed, err := gateway.ParseFlags([]string{"--key-cache-ttl=1m"})
	require.NoError(t, err)
	require.False(t, printed)
	require.Equal(t, 1024, cfg.MaxBodyBytes)
	require.Equal(t, time.Minute, cfg.KeyCacheTTL)
	require.Equal(t, 10, cfg.AuthFailuresPerMinute, "the default")
	require.Equal(t, 20, cfg.AuthFailureBurst, "the default")
	require.Empty(t, cfg.TrustedProxies, "no proxy is trusted by default")
	require.Equal(t, 2<<20, gateway.DefaultMaxBodyBytes)
}
