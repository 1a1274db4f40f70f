package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/orchestrator/internal/decide"
)

// Limits are the operator's bounds on executions: how many times one step may be entered
// and how many events one execution may have. They are ceilings: a playbook's
// executor.spec.policy.limits may lower them for its executions, never raise them
// (decide.EffectiveLimits). Every replica of the orchestrator should have the same limits;
// a change applies to running executions from their next decision.
type Limits struct {
	// MaxStepEntries and MaxEvents apply to every tenant without a value of its own
	// (NOETL_MAX_STEP_ENTRIES, NOETL_MAX_EVENTS); zero means decide's defaults.
	MaxStepEntries, MaxEvents int64
	// Tenants holds the limits of particular tenants (NOETL_TENANT_LIMITS); a field a
	// tenant leaves at zero falls back to the global value.
	Tenants map[string]TenantLimits
}

// TenantLimits are one tenant's limits, as NOETL_TENANT_LIMITS writes them.
type TenantLimits struct {
	// MaxStepEntries bounds the entries of one step in one execution (zero: not set).
	MaxStepEntries int64 `json:"max_step_entries,omitempty"`
	// MaxEvents bounds the events of one execution (zero: not set).
	MaxEvents int64 `json:"max_events,omitempty"`
}

// For returns the limits of an execution of tenant, naming the setting each comes from.
func (l Limits) For(tenant string) decide.Limits {
	var out decide.Limits
	if l.MaxStepEntries > 0 {
		out.StepEntries = decide.Limit{Max: l.MaxStepEntries, Source: "NOETL_MAX_STEP_ENTRIES"}
	}
	if l.MaxEvents > 0 {
		out.Events = decide.Limit{Max: l.MaxEvents, Source: "NOETL_MAX_EVENTS"}
	}
	if t, ok := l.Tenants[tenant]; ok {
		if t.MaxStepEntries > 0 {
			out.StepEntries = decide.Limit{Max: t.MaxStepEntries, Source: fmt.Sprintf("%s of tenant %q (NOETL_TENANT_LIMITS)", playbook.LimitMaxStepEntries, tenant)}
		}
		if t.MaxEvents > 0 {
			out.Events = decide.Limit{Max: t.MaxEvents, Source: fmt.Sprintf("%s of tenant %q (NOETL_TENANT_LIMITS)", playbook.LimitMaxEvents, tenant)}
		}
	}
	return out
}

// ParseTenantLimits reads NOETL_TENANT_LIMITS: a JSON object mapping a tenant to its
// limits, {"acme": {"max_step_entries": 100, "max_events": 50000}}, each field optional
// and a positive integer. Empty text means no tenant limits. The error names the tenant
// and the field.
func ParseTenantLimits(s string) (map[string]TenantLimits, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	var raw map[string]map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf(`want a JSON object such as {"tenant": {"max_step_entries": 100, "max_events": 50000}}: %w`, err)
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return nil, errors.New("want one JSON object, found more after it")
	}
	tenants := make([]string, 0, len(raw))
	for t := range raw {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	out := make(map[string]TenantLimits, len(raw))
	for _, t := range tenants {
		if t == "" {
			return nil, errors.New("a tenant name is empty")
		}
		var tl TenantLimits
		fields := make([]string, 0, len(raw[t]))
		for f := range raw[t] {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		for _, f := range fields {
			var dst *int64
			switch f {
			case playbook.LimitMaxStepEntries:
				dst = &tl.MaxStepEntries
			case playbook.LimitMaxEvents:
				dst = &tl.MaxEvents
			default:
				return nil, fmt.Errorf("tenant %q: unknown limit %q (known: %s, %s)", t, f, playbook.LimitMaxStepEntries, playbook.LimitMaxEvents)
			}
			n, err := strconv.ParseInt(string(raw[t][f]), 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("tenant %q: %s must be a positive integer, not %s", t, f, raw[t][f])
			}
			*dst = n
		}
		out[t] = tl
	}
	return out, nil
}
