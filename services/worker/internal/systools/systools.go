// Package systools holds the system_* tools: the privileged surface of the system
// playbooks (system/retention, system/cleanup, system/stalled_report). Each one acts
// through the owner of the rows it touches, never on the database itself: the purge of an
// execution's log is a request the materializer alone executes (package sysop), snapshots
// are the statebuilder's, results the resultstore's.
//
// A system tool runs for a system/ playbook on the system pool (the worker's admit
// refuses anything else), or, for the kinds in playbook.TenantSafeToolKinds, for a
// tenant's override <tenant>/system/<name> on any pool, with the tenant's identity and on
// that tenant only.
package systools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/internal/sysop"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Deps are what the system tools call: the materializer over NATS (signed with Trust),
// the orchestrator's SystemService, the resultstore and the statebuilder.
type Deps struct {
	NC           *nats.Conn
	Trust        *auth.Trust
	Orchestrator orchv1.SystemServiceClient
	Results      rsv1.ResultStoreServiceClient
	State        sbv1.StateServiceClient
}

// ErrNotWired is the error of a system tool run by a worker built without its
// dependencies.
var ErrNotWired = errors.New("system tools are not wired in this worker")

// Register adds the system tools of pool to r: every system tool on the system pool, the
// tenant-safe ones elsewhere.
func Register(r tools.Registry, pool string, d *Deps) {
	all := map[string]tools.Tool{
		"system_purge":    &purge{d: d, pool: pool},
		"system_cleanup":  &cleanup{d: d, pool: pool},
		"system_sql_read": &sqlRead{d: d, pool: pool},
	}
	for kind, t := range all {
		if pool == "system" || slices.Contains(playbook.TenantSafeToolKinds, kind) {
			r[kind] = t
		}
	}
}

// scope is who a system tool acts for.
type scope struct {
	// platform is set for a system/ playbook on the system pool: every tenant.
	platform bool
	// tenant is the tenant of an override (<tenant>/system/<name>).
	tenant string
	// name is the system playbook's name (retention, ...).
	name string
}

// scopeOf returns the scope of a call, or an error when the call is neither a system/
// playbook's on the system pool nor, for a tenant-safe kind, a tenant's override.
func scopeOf(c *tools.Call, pool string) (scope, error) {
	if name, ok := domain.SystemName(c.PlaybookPath); ok {
		if pool != "system" {
			return scope{}, &tools.Error{Msg: fmt.Sprintf("%s: runs only on the system pool, not %q", c.Kind, pool)}
		}
		return scope{platform: true, name: name}, nil
	}
	if name, ok := domain.OverrideName(c.Tenant, c.PlaybookPath); ok && slices.Contains(playbook.TenantSafeToolKinds, c.Kind) {
		return scope{tenant: c.Tenant, name: name}, nil
	}
	return scope{}, &tools.Error{Msg: fmt.Sprintf("%s: reserved for system/ playbooks (an override <tenant>/system/<name> may use %s)", c.Kind, strings.Join(playbook.TenantSafeToolKinds, ", "))}
}

// failure is a tool error for err, retryable when the callee could not be reached.
func failure(what string, err error) error {
	retry := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		retry = true
	}
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
	}
	return &tools.Error{Msg: what + ": " + msg, Retryable: retry}
}

// duration reads a duration field: a Go duration string ("720h", "15m") or milliseconds.
func duration(cfg map[string]any, field string, def time.Duration) (time.Duration, error) {
	v, ok := cfg[field]
	if !ok || v == nil || v == "" {
		return def, nil
	}
	switch x := v.(type) {
	case string:
		d, err := time.ParseDuration(x)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a duration (e.g. 720h)", field, x)
		}
		return d, nil
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return 0, fmt.Errorf("%s: %v is not whole milliseconds", field, x)
		}
		return time.Duration(n) * time.Millisecond, nil
	case float64:
		return time.Duration(x) * time.Millisecond, nil
	case int:
		return time.Duration(x) * time.Millisecond, nil
	case int64:
		return time.Duration(x) * time.Millisecond, nil
	}
	return 0, fmt.Errorf("%s: want a duration such as 720h, not %T", field, v)
}

// integer reads a whole-number field.
func integer(cfg map[string]any, field string, def int) (int, error) {
	v, ok := cfg[field]
	if !ok || v == nil || v == "" {
		return def, nil
	}
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		return int(n), err
	case float64:
		return int(x), nil
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case string:
		n, err := strconv.Atoi(x)
		if err != nil {
			return 0, fmt.Errorf("%s: %q is not a whole number", field, x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s: want a whole number, not %T", field, v)
}

// invalid is a non-retryable tool error naming the tool.
func invalid(kind string, err error) error { return &tools.Error{Msg: kind + ": " + err.Error()} }

// maxRounds bounds the purge requests of one run; a run that reaches it reports more.
const maxRounds = 20

// purgeBatch is the executions one purge request deletes at most.
const purgeBatch = 500

// purge (kind system_purge) deletes the terminal executions that ended more than their
// tenant's retention ago: their log through the materializer, then their snapshots and
// results through their owners. On the platform's system/<name> it covers every tenant
// but those overriding system/<name>; on a tenant's override, that tenant only.
//
// Config: retention (a duration, at least sysop.MinRetention), tenants (tenant to
// duration; the platform's only), max_rounds.
type purge struct {
	d    *Deps
	pool string
}

// Run implements tools.Tool.
func (p *purge) Run(ctx context.Context, c *tools.Call) (any, error) {
	sc, err := scopeOf(c, p.pool)
	if err != nil {
		return nil, err
	}
	retention, err := duration(c.Config, "retention", 0)
	if err != nil {
		return nil, invalid(c.Kind, err)
	}
	if retention < sysop.MinRetention {
		return nil, invalid(c.Kind, fmt.Errorf("retention: %s is shorter than the minimum of %s", retention, sysop.MinRetention))
	}
	rounds, err := integer(c.Config, "max_rounds", maxRounds)
	if err != nil || rounds < 1 || rounds > 1000 {
		return nil, invalid(c.Kind, fmt.Errorf("max_rounds: must be between 1 and 1000"))
	}
	var tenants map[string]int64
	if m, ok := c.Config["tenants"].(map[string]any); ok && len(m) > 0 && sc.platform {
		tenants = map[string]int64{}
		for t := range m {
			d, err := duration(m, t, 0)
			if err != nil {
				return nil, invalid(c.Kind, fmt.Errorf("tenants.%w", err))
			}
			if d < sysop.MinRetention {
				return nil, invalid(c.Kind, fmt.Errorf("tenants.%s: %s is shorter than the minimum of %s", t, d, sysop.MinRetention))
			}
			tenants[t] = d.Milliseconds()
		}
	}
	if p.d == nil {
		return nil, invalid(c.Kind, ErrNotWired)
	}
	req := sysop.PurgeRequest{RetentionMS: retention.Milliseconds(), Limit: purgeBatch}
	principal := auth.ServicePrincipal("worker-" + p.pool)
	if sc.platform {
		req.Tenants = tenants
		list, err := p.d.Orchestrator.ListSystemPlaybooks(ctx, &orchv1.ListSystemPlaybooksRequest{Name: sc.name})
		if err != nil {
			return nil, failure(c.Kind+": overrides of system/"+sc.name, err)
		}
		for _, b := range list.GetPlaybooks() {
			for _, o := range b.GetOverrides() {
				req.Exclude = append(req.Exclude, o.GetTenant())
			}
		}
	} else {
		req.Tenant = sc.tenant
		principal = &auth.Principal{Tenant: sc.tenant, Subject: "playbook:" + c.PlaybookPath}
	}
	out := purgeResult{Retention: retention.String(), Excluded: req.Exclude, ByTenant: map[string]int64{}, ExecutionIDs: []string{}}
	if out.Excluded == nil {
		out.Excluded = []string{}
	}
	if sc.tenant != "" {
		out.Tenant = sc.tenant
	}
	for round := 0; round < rounds; round++ {
		var resp sysop.PurgeResponse
		if err := sysop.Call(ctx, p.d.NC, p.d.Trust, principal, sysop.OpPurge, req, &resp); err != nil {
			if errors.Is(err, sysop.ErrRefused) {
				return nil, invalid(c.Kind, err)
			}
			return nil, failure(c.Kind, err)
		}
		byTenant := map[string][]string{}
		var ids []string
		for _, g := range resp.Executions {
			if sc.tenant != "" && g.Tenant != sc.tenant {
				return nil, invalid(c.Kind, fmt.Errorf("the materializer purged execution %s of tenant %q for tenant %q", g.ExecutionID, g.Tenant, sc.tenant))
			}
			byTenant[g.Tenant] = append(byTenant[g.Tenant], g.ExecutionID)
			ids = append(ids, g.ExecutionID)
			out.Executions++
			out.Events += g.Events
			out.ByTenant[g.Tenant]++
			if len(out.ExecutionIDs) < maxListed {
				out.ExecutionIDs = append(out.ExecutionIDs, g.ExecutionID)
			}
		}
		if len(ids) > 0 {
			snaps, err := p.d.State.PurgeSnapshots(ctx, &sbv1.PurgeSnapshotsRequest{ExecutionIds: ids})
			if err != nil {
				return nil, failure(c.Kind+": snapshots", err)
			}
			out.Snapshots += snaps.GetDeleted()
			for _, t := range slices.Sorted(maps.Keys(byTenant)) {
				rs, err := p.d.Results.PurgeResults(ctx, &rsv1.PurgeResultsRequest{Tenant: t, ExecutionIds: byTenant[t]})
				if err != nil {
					return nil, failure(c.Kind+": results", err)
				}
				out.Results += rs.GetResults()
				out.ResultChunks += rs.GetChunks()
			}
		}
		if out.More = resp.More; !resp.More {
			break
		}
	}
	return out, nil
}

// maxListed bounds the execution ids a purge lists in its result.
const maxListed = 100

// purgeResult is system_purge's result.
type purgeResult struct {
	Retention    string           `json:"retention"`
	Tenant       string           `json:"tenant,omitempty"`
	Excluded     []string         `json:"excluded"`
	Executions   int64            `json:"executions"`
	Events       int64            `json:"events"`
	Snapshots    int64            `json:"snapshots"`
	Results      int64            `json:"results"`
	ResultChunks int64            `json:"result_chunks"`
	ByTenant     map[string]int64 `json:"by_tenant"`
	ExecutionIDs []string         `json:"execution_ids"`
	More         bool             `json:"more"`
}

// cleanup (kind system_cleanup) removes what nothing refers to: results past their expiry
// and chunks without a result (resultstore), snapshots of purged executions
// (statebuilder), dead materializer replica rows and expired leases (materializer).
// Config: grace (a duration: how long past its expiry a replica row or a lease is left).
type cleanup struct {
	d    *Deps
	pool string
}

// Run implements tools.Tool.
func (t *cleanup) Run(ctx context.Context, c *tools.Call) (any, error) {
	sc, err := scopeOf(c, t.pool)
	if err != nil {
		return nil, err
	}
	if !sc.platform {
		return nil, invalid(c.Kind, errors.New("only the platform's system/ playbooks may clean up"))
	}
	grace, err := duration(c.Config, "grace", 10*time.Minute)
	if err != nil || grace < 0 {
		return nil, invalid(c.Kind, fmt.Errorf("grace: want a duration of zero or more"))
	}
	if t.d == nil {
		return nil, invalid(c.Kind, ErrNotWired)
	}
	var mat sysop.CleanupResponse
	if err := sysop.Call(ctx, t.d.NC, t.d.Trust, auth.ServicePrincipal("worker-"+t.pool), sysop.OpCleanup, sysop.CleanupRequest{GraceMS: grace.Milliseconds()}, &mat); err != nil {
		if errors.Is(err, sysop.ErrRefused) {
			return nil, invalid(c.Kind, err)
		}
		return nil, failure(c.Kind, err)
	}
	rs, err := t.d.Results.CleanupResults(ctx, &rsv1.CleanupResultsRequest{})
	if err != nil {
		return nil, failure(c.Kind+": results", err)
	}
	snaps, err := t.d.State.PurgeSnapshots(ctx, &sbv1.PurgeSnapshotsRequest{Orphans: true})
	if err != nil {
		return nil, failure(c.Kind+": snapshots", err)
	}
	removed := map[string]int64{
		"expired_results":  rs.GetExpired(),
		"orphan_chunks":    rs.GetOrphanChunks(),
		"orphan_snapshots": snaps.GetOrphans(),
		"dead_replicas":    mat.Replicas,
		"stale_leases":     mat.Leases,
	}
	var total int64
	for _, n := range removed {
		total += n
	}
	return map[string]any{"removed": removed, "total": total, "grace": grace.String()}, nil
}

// sqlRead (kind system_sql_read) runs one read-only query on schema noetl through the
// statebuilder (a READ ONLY transaction, a statement timeout, a row cap) and returns its
// rows as records. Config: sql, params (a list bound to $1, $2, ...), max_rows (default
// 1,000, at most 10,000), timeout (default 5s, at most 1m).
type sqlRead struct {
	d    *Deps
	pool string
}

// Run implements tools.Tool.
func (t *sqlRead) Run(ctx context.Context, c *tools.Call) (any, error) {
	sc, err := scopeOf(c, t.pool)
	if err != nil {
		return nil, err
	}
	if !sc.platform {
		return nil, invalid(c.Kind, errors.New("only the platform's system/ playbooks may read the noetl schema"))
	}
	sql, _ := c.Config["sql"].(string)
	if strings.TrimSpace(sql) == "" {
		return nil, invalid(c.Kind, errors.New("sql: required"))
	}
	var params []byte
	if v, ok := c.Config["params"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return nil, invalid(c.Kind, errors.New("params: want a list"))
		}
		if params, err = json.Marshal(list); err != nil {
			return nil, invalid(c.Kind, fmt.Errorf("params: %w", err))
		}
	}
	maxRows, err := integer(c.Config, "max_rows", 1000)
	if err != nil || maxRows < 1 || maxRows > 10000 {
		return nil, invalid(c.Kind, errors.New("max_rows: must be between 1 and 10000"))
	}
	timeout, err := duration(c.Config, "timeout", 5*time.Second)
	if err != nil || timeout <= 0 || timeout > time.Minute {
		return nil, invalid(c.Kind, errors.New("timeout: must be a duration up to 1m"))
	}
	if t.d == nil {
		return nil, invalid(c.Kind, ErrNotWired)
	}
	resp, err := t.d.State.QueryReadOnly(ctx, &sbv1.QueryReadOnlyRequest{Sql: sql, ParamsJson: params, MaxRows: int32(maxRows), TimeoutMs: int32(timeout.Milliseconds())})
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			return nil, invalid(c.Kind, errors.New(status.Convert(err).Message()))
		}
		return nil, failure(c.Kind, err)
	}
	var rows [][]any
	if err := domain.DecodeJSON(resp.GetRowsJson(), &rows); err != nil {
		return nil, invalid(c.Kind, fmt.Errorf("rows: %w", err))
	}
	records := make([]map[string]any, 0, len(rows))
	for _, r := range rows {
		rec := make(map[string]any, len(resp.GetColumns()))
		for i, col := range resp.GetColumns() {
			if i < len(r) {
				rec[col] = r[i]
			}
		}
		records = append(records, rec)
	}
	return map[string]any{"columns": resp.GetColumns(), "rows": records, "row_count": len(records), "truncated": resp.GetTruncated()}, nil
}
