package worker_test

import (
	"testing"
	"time"

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
		"NOETL_INLINE_RESULT_MAX_BYTES":   configtest.Positive,
		"NOETL_PARTITIONS":                configtest.Positive,
		"NOETL_STREAM_REPLICAS":           configtest.Positive,
		"NOETL_WORKER_CONCURRENCY":        configtest.Positive,
		"NOETL_WORKER_DRAIN_TIMEOUT":      configtest.NonNegative,
		"NOETL_WORKER_RESULT_STORE_RETRY": configtest.Positive,
		"NOETL_WASM_MEMORY_MB":            configtest.Positive,
		"NOETL_WASM_TIMEOUT":              configtest.Positive,
		"NOETL_WASM_CACHE_MODULES":        configtest.Positive,
	})
	for _, tc := range []struct{ env, value, want string }{
		{"NOETL_WORKER_CONCURRENCY", "8x", `NOETL_WORKER_CONCURRENCY="8x": invalid integer`},
		{"NOETL_WORKER_CONCURRENCY", "-4", `NOETL_WORKER_CONCURRENCY="-4": must be positive`},
		{"NOETL_WORKER_DRAIN_TIMEOUT", "30", `NOETL_WORKER_DRAIN_TIMEOUT="30": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)`},
		{"NOETL_WORKER_DRAIN_TIMEOUT", "-1s", `NOETL_WORKER_DRAIN_TIMEOUT="-1s": must not be negative`},
		{"NOETL_WORKER_SHELL", "maybe", `NOETL_WORKER_SHELL="maybe": invalid boolean (want true or false)`},
		{"NOETL_WORKER_SCRIPT_DIR", "/no/such/dir/noetl", `NOETL_WORKER_SCRIPT_DIR="/no/such/dir/noetl": not an existing directory`},
		{"NOETL_WORKER_SCRIPT_DIR", "config_test.go", `NOETL_WORKER_SCRIPT_DIR="config_test.go": not a directory`},
		{"NOETL_WASM_ENGINE", "jit", `NOETL_WASM_ENGINE="jit": must be compiler or interpreter`},
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
	require.Equal(t, 30*time.Second, cfg.DrainTimeout, "the default drain timeout")
	t.Setenv("NOETL_WORKER_DRAIN_TIMEOUT", "0")
	cfg, _, err = worker.ParseFlags(nil)
	require.NoError(t, err)
	require.Zero(t, cfg.DrainTimeout, "0 cancels the running commands at once")
}

// NOETL_HTTP_EGRESS picks the http tool's policy; the deprecated NOETL_HTTP_ALLOW_PRIVATE=true
// still means private, and contradicting it with another policy stops start-up.
func TestHTTPEgressSetting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    string
		wantErr string
	}{
		{name: "default", want: worker.HTTPEgressPublic},
		{name: "loopback", env: map[string]string{"NOETL_HTTP_EGRESS": "loopback"}, want: worker.HTTPEgressLoopback},
		{name: "flag", args: []string{"--http-egress=private"}, want: worker.HTTPEgressPrivate},
		{name: "deprecated alias", env: map[string]string{"NOETL_HTTP_ALLOW_PRIVATE": "true"}, want: worker.HTTPEgressPrivate},
		{name: "alias off", env: map[string]string{"NOETL_HTTP_ALLOW_PRIVATE": "false", "NOETL_HTTP_EGRESS": "loopback"}, want: worker.HTTPEgressLoopback},
		{name: "alias agrees", env: map[string]string{"NOETL_HTTP_ALLOW_PRIVATE": "true", "NOETL_HTTP_EGRESS": "private"}, want: worker.HTTPEgressPrivate},
		{name: "alias conflicts", env: map[string]string{"NOETL_HTTP_ALLOW_PRIVATE": "true", "NOETL_HTTP_EGRESS": "loopback"},
			wantErr: `NOETL_HTTP_ALLOW_PRIVATE=true (deprecated: it means NOETL_HTTP_EGRESS=private) conflicts with NOETL_HTTP_EGRESS="loopback"; drop NOETL_HTTP_ALLOW_PRIVATE`},
		{name: "alias conflicts with the flag", env: map[string]string{"NOETL_HTTP_ALLOW_PRIVATE": "true"}, args: []string{"--http-egress=public"},
			wantErr: `NOETL_HTTP_ALLOW_PRIVATE=true (deprecated: it means NOETL_HTTP_EGRESS=private) conflicts with NOETL_HTTP_EGRESS="public"; drop NOETL_HTTP_ALLOW_PRIVATE`},
		{name: "unknown", env: map[string]string{"NOETL_HTTP_EGRESS": "everything"}, wantErr: `NOETL_HTTP_EGRESS="everything": want public, loopback or private`},
		{name: "unknown flag value", args: []string{"--http-egress=all"}, wantErr: `--http-egress="all": want public, loopback or private`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, _, err := worker.ParseFlags(tc.args)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.HTTPEgress)
		})
	}
	require.NoError(t, worker.CheckHTTPEgress(""))
	require.EqualError(t, worker.CheckHTTPEgress("wide"), "want public, loopback or private")
}
