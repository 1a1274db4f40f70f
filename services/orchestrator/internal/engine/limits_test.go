package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

func TestParseTenantLimits(t *testing.T) {
	got, err := ParseTenantLimits(` {"acme": {"max_step_entries": 100, "max_events": 50000}, "beta": {"max_events": 7}, "gamma": {}} `)
	require.NoError(t, err)
	require.Equal(t, map[string]TenantLimits{"acme": {MaxStepEntries: 100, MaxEvents: 50000}, "beta": {MaxEvents: 7}, "gamma": {}}, got)
	got, err = ParseTenantLimits("  ")
	require.NoError(t, err)
	require.Nil(t, got)

	for in, want := range map[string]string{
		`{"acme": {"max_events": 0}}`:          `tenant "acme": max_events must be a positive integer, not 0`,
		`{"acme": {"max_events": -5}}`:         `tenant "acme": max_events must be a positive integer, not -5`,
		`{"acme": {"max_step_entries": 1.5}}`:  `tenant "acme": max_step_entries must be a positive integer, not 1.5`,
		`{"acme": {"max_step_entries": 1e30}}`: `tenant "acme": max_step_entries must be a positive integer, not 1e30`,
		`{"acme": {"max_steps": 3}}`:           `tenant "acme": unknown limit "max_steps" (known: max_step_entries, max_events)`,
		`{"": {"max_events": 3}}`:              `a tenant name is empty`,
		`{"acme": {"max_events": "3"}}`:        `tenant "acme": max_events must be a positive integer, not "3"`,
		`[1]`:                                  `want a JSON object such as`,
		`{"acme": {}} {}`:                      `want one JSON object, found more after it`,
		`{"acme":`:                             `want a JSON object such as`,
	} {
		_, err := ParseTenantLimits(in)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), want, in)
	}
}

func TestLimitsFor(t *testing.T) {
	require.Equal(t, decide.Limits{}, Limits{}.For("acme"), "nothing set: decide's defaults")
	l := Limits{MaxStepEntries: 500, MaxEvents: 90_000, Tenants: map[string]TenantLimits{"acme": {MaxStepEntries: 20}, "big": {MaxEvents: 5_000_000}}}
	require.Equal(t, decide.Limits{
		StepEntries: decide.Limit{Max: 20, Source: `max_step_entries of tenant "acme" (NOETL_TENANT_LIMITS)`},
		Events:      decide.Limit{Max: 90_000, Source: "NOETL_MAX_EVENTS"},
	}, l.For("acme"))
	require.Equal(t, decide.Limits{
		StepEntries: decide.Limit{Max: 500, Source: "NOETL_MAX_STEP_ENTRIES"},
		Events:      decide.Limit{Max: 5_000_000, Source: `max_events of tenant "big" (NOETL_TENANT_LIMITS)`},
	}, l.For("big"))
	require.Equal(t, decide.Limits{
		StepEntries: decide.Limit{Max: 500, Source: "NOETL_MAX_STEP_ENTRIES"},
		Events:      decide.Limit{Max: 90_000, Source: "NOETL_MAX_EVENTS"},
	}, l.For("other"))
}
