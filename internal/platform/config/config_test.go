package config_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
)

// settings is a FlagSet with one setting of each kind.
type settings struct {
	Name    string
	Key     string
	N       int
	On      bool
	Every   time.Duration
	Workers int
	TTL     time.Duration
}

func newSettings() (*settings, *config.FlagSet) {
	var s settings
	fs := config.New("test")
	fs.String(&s.Name, "name", "NOETL_TEST_NAME", "default-name", "a string")
	fs.Secret(&s.Key, "key", "NOETL_TEST_KEY", "", "a secret")
	fs.Int(&s.N, "n", "NOETL_TEST_N", 7, "an int")
	fs.Bool(&s.On, "on", "NOETL_TEST_ON", false, "a bool")
	fs.Duration(&s.Every, "every", "NOETL_TEST_EVERY", 30*time.Second, "a duration")
	fs.Int(&s.Workers, "workers", "NOETL_TEST_WORKERS", 4, "a positive int", config.Positive)
	fs.Duration(&s.TTL, "ttl", "NOETL_TEST_TTL", time.Hour, "a non-negative duration", config.NonNegative)
	return &s, fs
}

func parse(t *testing.T, args ...string) (*settings, error) {
	t.Helper()
	s, fs := newSettings()
	fs.SetOutput(&bytes.Buffer{})
	printed, err := fs.Parse(args)
	require.False(t, printed)
	return s, err
}

func TestDefaults(t *testing.T) {
	s, err := parse(t)
	require.NoError(t, err)
	require.Equal(t, settings{Name: "default-name", N: 7, Every: 30 * time.Second, Workers: 4, TTL: time.Hour}, *s)
}

// Each typed binder: a good value from the env, a malformed one from the env (an error
// naming the variable and the value, never the default), a malformed flag (naming the
// flag), and a flag overriding the env (even a malformed env value).
func TestTypedBinders(t *testing.T) {
	for _, tc := range []struct {
		kind, flag, env string
		good            string
		get             func(*settings) any
		want            any
		bad, why        string
		other           string
		otherWant       any
	}{
		{kind: "int", flag: "n", env: "NOETL_TEST_N", good: "12", get: func(s *settings) any { return s.N }, want: 12,
			bad: "8x", why: "invalid integer", other: "-3", otherWant: -3},
		{kind: "int out of range", flag: "n", env: "NOETL_TEST_N", good: " 12 ", get: func(s *settings) any { return s.N }, want: 12,
			bad: "99999999999999999999", why: "integer out of range", other: "0", otherWant: 0},
		{kind: "bool", flag: "on", env: "NOETL_TEST_ON", good: "true", get: func(s *settings) any { return s.On }, want: true,
			bad: "yes", why: "invalid boolean (want true or false)", other: "false", otherWant: false},
		{kind: "duration", flag: "every", env: "NOETL_TEST_EVERY", good: "1m30s", get: func(s *settings) any { return s.Every }, want: 90 * time.Second,
			bad: "soon", why: "invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)", other: "2h", otherWant: 2 * time.Hour},
		{kind: "duration without a unit", flag: "every", env: "NOETL_TEST_EVERY", good: "0", get: func(s *settings) any { return s.Every }, want: time.Duration(0),
			bad: "30", why: "invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)", other: "5s", otherWant: 5 * time.Second},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Run("good env", func(t *testing.T) {
				t.Setenv(tc.env, tc.good)
				s, err := parse(t)
				require.NoError(t, err)
				require.Equal(t, tc.want, tc.get(s))
			})
			t.Run("malformed env", func(t *testing.T) {
				t.Setenv(tc.env, tc.bad)
				_, err := parse(t)
				require.EqualError(t, err, tc.env+`="`+tc.bad+`": `+tc.why)
			})
			t.Run("malformed flag", func(t *testing.T) {
				_, err := parse(t, "--"+tc.flag+"="+tc.bad)
				require.EqualError(t, err, "--"+tc.flag+`="`+tc.bad+`": `+tc.why)
			})
			t.Run("flag over env", func(t *testing.T) {
				t.Setenv(tc.env, tc.good)
				s, err := parse(t, "--"+tc.flag+"="+tc.other)
				require.NoError(t, err)
				require.Equal(t, tc.otherWant, tc.get(s))
			})
			t.Run("flag over malformed env", func(t *testing.T) {
				t.Setenv(tc.env, tc.bad)
				s, err := parse(t, "--"+tc.flag+"="+tc.other)
				require.NoError(t, err)
				require.Equal(t, tc.otherWant, tc.get(s))
			})
			t.Run("empty env is unset", func(t *testing.T) {
				t.Setenv(tc.env, "  ")
				s, err := parse(t)
				require.NoError(t, err)
				def, _ := parse(t)
				require.Equal(t, tc.get(def), tc.get(s))
			})
		})
	}
}

func TestStrings(t *testing.T) {
	t.Setenv("NOETL_TEST_NAME", "from-env")
	s, err := parse(t)
	require.NoError(t, err)
	require.Equal(t, "from-env", s.Name)

	s, err = parse(t, "--name", "from-flag")
	require.NoError(t, err)
	require.Equal(t, "from-flag", s.Name)

	// An empty variable sets an empty string (strings parse nothing).
	t.Setenv("NOETL_TEST_NAME", "")
	s, err = parse(t)
	require.NoError(t, err)
	require.Equal(t, "", s.Name)
}

func TestBareBoolFlag(t *testing.T) {
	t.Setenv("NOETL_TEST_ON", "false")
	s, err := parse(t, "--on")
	require.NoError(t, err)
	require.True(t, s.On)
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		env, value, want string
	}{
		{"NOETL_TEST_WORKERS", "0", `NOETL_TEST_WORKERS="0": must be positive`},
		{"NOETL_TEST_WORKERS", "-2", `NOETL_TEST_WORKERS="-2": must be positive`},
		{"NOETL_TEST_TTL", "-1s", `NOETL_TEST_TTL="-1s": must not be negative`},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := parse(t)
			require.EqualError(t, err, tc.want)
		})
	}
	t.Run("zero allowed", func(t *testing.T) {
		t.Setenv("NOETL_TEST_TTL", "0")
		s, err := parse(t)
		require.NoError(t, err)
		require.Zero(t, s.TTL)
	})
	t.Run("flag named", func(t *testing.T) {
		t.Setenv("NOETL_TEST_WORKERS", "3")
		_, err := parse(t, "--workers=-1")
		require.EqualError(t, err, `--workers="-1": must be positive`)
	})
	t.Run("flag fixes a bad env", func(t *testing.T) {
		t.Setenv("NOETL_TEST_WORKERS", "0")
		s, err := parse(t, "--workers=2")
		require.NoError(t, err)
		require.Equal(t, 2, s.Workers)
	})
	t.Run("bad default", func(t *testing.T) {
		var n int
		fs := config.New("test")
		fs.Int(&n, "n", "NOETL_TEST_N", 0, "an int", config.Positive)
		_, err := fs.Parse(nil)
		require.EqualError(t, err, `--n default="0": must be positive`)
	})
	t.Run("string check, secret masked", func(t *testing.T) {
		var key string
		fs := config.New("test")
		fs.Secret(&key, "key", "NOETL_TEST_KEY", "", "a secret", func(s string) error {
			if len(s) < 32 {
				return errors.New("shorter than 32 bytes")
			}
			return nil
		})
		t.Setenv("NOETL_TEST_KEY", "hunter2")
		_, err := fs.Parse(nil)
		require.EqualError(t, err, `NOETL_TEST_KEY=****: shorter than 32 bytes`)
		require.NotContains(t, err.Error(), "hunter2")
	})
}

// Every problem is reported, on one line: malformed values first, then values that fail
// their checks, each in the order the settings are bound.
func TestEveryProblem(t *testing.T) {
	t.Setenv("NOETL_TEST_WORKERS", "-1")
	t.Setenv("NOETL_TEST_N", "8x")
	t.Setenv("NOETL_TEST_TTL", "-1h")
	t.Setenv("NOETL_TEST_EVERY", "soon")
	_, err := parse(t)
	require.EqualError(t, err, `NOETL_TEST_N="8x": invalid integer; NOETL_TEST_EVERY="soon": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h); NOETL_TEST_WORKERS="-1": must be positive; NOETL_TEST_TTL="-1h": must not be negative`)
	var list config.Errors
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 4)
	require.NotContains(t, err.Error(), "\n")
}

func TestFlagErrors(t *testing.T) {
	_, err := parse(t, "--nope")
	require.EqualError(t, err, "flag provided but not defined: -nope")
	_, err = parse(t, "--n")
	require.EqualError(t, err, "flag needs an argument: -n")
	_, err = parse(t, "extra")
	require.EqualError(t, err, `unexpected argument "extra" (settings are flags, e.g. --name=value)`)
	// A malformed env value is still reported beside a bad flag.
	t.Setenv("NOETL_TEST_EVERY", "soon")
	_, err = parse(t, "--n=x")
	require.EqualError(t, err, `NOETL_TEST_EVERY="soon": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h); --n="x": invalid integer`)
}

func TestPrintConfig(t *testing.T) {
	t.Setenv("NOETL_TEST_KEY", "hunter2")
	t.Setenv("NOETL_TEST_N", "9")
	_, fs := newSettings()
	var out bytes.Buffer
	fs.SetOutput(&out)
	printed, err := fs.Parse([]string{"--print-config", "--every=5m"})
	require.NoError(t, err)
	require.True(t, printed)
	lines := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(l)
		lines[f[0]] = f[1:]
	}
	require.Equal(t, []string{"NOETL_TEST_KEY", "****"}, lines["key"])
	require.Equal(t, []string{"NOETL_TEST_N", "9"}, lines["n"])
	require.Equal(t, []string{"NOETL_TEST_EVERY", "5m0s"}, lines["every"])
	require.Equal(t, []string{"NOETL_TEST_NAME", "default-name"}, lines["name"])
	require.NotContains(t, out.String(), "hunter2")

	// A malformed value is an error with --print-config too.
	t.Setenv("NOETL_TEST_N", "9x")
	_, fs = newSettings()
	out.Reset()
	fs.SetOutput(&out)
	printed, err = fs.Parse([]string{"--print-config"})
	require.EqualError(t, err, `NOETL_TEST_N="9x": invalid integer`)
	require.False(t, printed)
	require.Empty(t, out.String())
}

func TestHelp(t *testing.T) {
	t.Setenv("NOETL_TEST_N", "9")
	_, fs := newSettings()
	var out bytes.Buffer
	fs.SetOutput(&out)
	printed, err := fs.Parse([]string{"-h"})
	require.NoError(t, err)
	require.True(t, printed)
	require.Contains(t, out.String(), "($NOETL_TEST_N)")
	require.Contains(t, out.String(), "(default 7)", "usage shows the built-in default")
	require.Contains(t, out.String(), "-on")
}

func TestEnv(t *testing.T) {
	vars := map[string]string{
		"NOETL_A": "8x", "NOETL_B": "soon", "NOETL_C": "maybe", "NOETL_D": "-1",
		"NOETL_OK_INT": "5", "NOETL_OK_DUR": "2s", "NOETL_OK_BOOL": "1", "NOETL_URL": "postgres://u:pw@h/db", "NOETL_EMPTY": "",
	}
	env := config.Env{Lookup: func(n string) (string, bool) { v, ok := vars[n]; return v, ok }}
	require.Equal(t, 64, env.Int("NOETL_A", 64))
	require.Equal(t, time.Second, env.Duration("NOETL_B", time.Second))
	require.False(t, env.Bool("NOETL_C", false))
	require.Equal(t, 3, env.Int("NOETL_D", 3, config.Positive))
	require.Equal(t, 5, env.Int("NOETL_OK_INT", 1))
	require.Equal(t, 2*time.Second, env.Duration("NOETL_OK_DUR", 0, config.Positive))
	require.True(t, env.Bool("NOETL_OK_BOOL", false))
	require.Equal(t, 9, env.Int("NOETL_EMPTY", 9))
	require.Equal(t, "postgres://u:pw@h/db", env.Secret("NOETL_URL", ""))
	require.Equal(t, "def", env.String("NOETL_UNSET", "def"))
	require.EqualError(t, env.Err(), `NOETL_A="8x": invalid integer; NOETL_B="soon": invalid duration (want a number with a unit, e.g. 30s, 5m, 1h); NOETL_C="maybe": invalid boolean (want true or false); NOETL_D="-1": must be positive`)

	var clean config.Env
	t.Setenv("NOETL_TEST_ENV", "4")
	require.Equal(t, 4, clean.Int("NOETL_TEST_ENV", 1))
	require.NoError(t, clean.Err())
}

func TestRequired(t *testing.T) {
	cfg := struct{ A, B string }{A: "x"}
	require.NoError(t, config.Required(&cfg, "A"))
	require.EqualError(t, config.Required(&cfg, "A", "B"), "missing required configuration: B")
}

// boundConfig binds its fields as a service's Config does.
type boundConfig struct{ URL, Addr, Free string }

func (c *boundConfig) Flags(fs *config.FlagSet) {
	fs.String(&c.URL, "pg-url", "NOETL_PG_URL", "", "database")
	fs.String(&c.Addr, "grpc-addr", "NOETL_GRPC_ADDR", "", "listen address")
}

func TestRequiredNamesTheVariable(t *testing.T) {
	cfg := boundConfig{Addr: "x"}
	require.EqualError(t, config.Required(&cfg, "URL", "Addr", "Free"), "missing required configuration: NOETL_PG_URL (--pg-url), Free")
}
