// Package configtest checks that a service's configuration rejects bad values of every
// typed setting it binds, naming the variable and the value.
package configtest

import (
	"flag"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/config"
)

// Check is the range an int or duration setting must be in.
type Check int

const (
	// Any is any value that parses.
	Any Check = iota
	// Positive is above zero (config.Positive).
	Positive
	// NonNegative is zero or above (config.NonNegative).
	NonNegative
)

const (
	invalidInt      = "invalid integer"
	invalidBool     = "invalid boolean (want true or false)"
	invalidDuration = "invalid duration (want a number with a unit, e.g. 30s, 5m, 1h)"
)

// RejectsBadValues finds every typed setting that bind declares and requires parse, with
// one bad value at a time in the setting's variable, to fail with exactly
// `NAME="value": what is wrong`: for a malformed value of each int, bool and duration
// setting, and for values outside checks[NAME] of each int and duration setting, which
// checks must list (Any for no range). Values at the edge of a check must parse. parse
// reads the environment (a service's ParseFlags with no arguments).
func RejectsBadValues(t *testing.T, bind func(*config.FlagSet), parse func() error, checks map[string]Check) {
	t.Helper()
	require.NoError(t, parse(), "the defaults must parse")
	fs := config.New("configtest")
	bind(fs)
	kinds := map[string]any{}
	fs.VisitAll(func(fl *flag.Flag) {
		g, ok := fl.Value.(flag.Getter)
		require.True(t, ok, "--%s is not a config setting", fl.Name)
		switch g.Get().(type) {
		case int, bool, time.Duration:
			kinds[fs.EnvVar(fl.Name)] = g.Get()
		}
	})
	for env := range checks {
		_, ok := kinds[env]
		require.True(t, ok, "%s is not an int or duration setting", env)
	}
	envs := make([]string, 0, len(kinds))
	for env := range kinds {
		envs = append(envs, env)
	}
	sort.Strings(envs)
	for _, env := range envs {
		type value struct{ text, why string }
		var bad, good []value
		check, listed := checks[env]
		switch kinds[env].(type) {
		case int:
			require.True(t, listed, "%s: say its range in checks (Any for none)", env)
			bad = append(bad, value{"8x", invalidInt}, value{"1.5", invalidInt})
			switch check {
			case Positive:
				bad = append(bad, value{"0", "must be positive"}, value{"-1", "must be positive"})
				good = append(good, value{text: "1"})
			case NonNegative:
				bad = append(bad, value{"-1", "must not be negative"})
				good = append(good, value{text: "0"})
			}
		case time.Duration:
			require.True(t, listed, "%s: say its range in checks (Any for none)", env)
			bad = append(bad, value{"soon", invalidDuration}, value{"30", invalidDuration})
			switch check {
			case Positive:
				bad = append(bad, value{"0s", "must be positive"}, value{"-5s", "must be positive"})
				good = append(good, value{text: "1ms"})
			case NonNegative:
				bad = append(bad, value{"-5s", "must not be negative"})
				good = append(good, value{text: "0"})
			}
		case bool:
			require.False(t, listed, "%s: a bool has no range", env)
			bad = append(bad, value{"maybe", invalidBool})
			good = append(good, value{text: "true"}, value{text: "0"})
		}
		for _, v := range bad {
			t.Run(env+"="+v.text, func(t *testing.T) {
				t.Setenv(env, v.text)
				require.EqualError(t, parse(), env+`="`+v.text+`": `+v.why)
			})
		}
		for _, v := range good {
			t.Run(env+"="+v.text, func(t *testing.T) {
				t.Setenv(env, v.text)
				require.NoError(t, parse())
			})
		}
	}
}
