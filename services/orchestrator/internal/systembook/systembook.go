// Package systembook ships the system playbooks with the platform: the files under
// system/ are embedded in the orchestrator, registered at start-up in the platform's
// tenant as new catalog versions when their content changed (registering identical
// content returns the stored version, so restarts and replicas add nothing), and each is
// given its schedule, created or brought up to date idempotently. They run on the system
// pool like any execution of a system/ playbook.
//
// A tenant overrides one as <tenant>/system/<name>, registered by an admin of that tenant
// in its own catalog: the override gets the same schedule in the tenant, runs with the
// tenant's identity on the shared pool, may use only playbook.TenantSafeToolKinds, and the
// platform's playbook leaves that tenant alone (system_purge excludes the tenants that
// override the playbook it runs for).
package systembook

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/sysop"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/schedule"
)

//go:embed system/*.yaml
var files embed.FS

// Book is one system playbook and its schedule.
type Book struct {
	// Name: the path is system/<name> and the schedule system.<name>.
	Name string
	// Every is its schedule's interval.
	Every time.Duration
	// Content is the embedded YAML.
	Content string
}

// Path is the book's catalog path.
func (b Book) Path() string { return domain.SystemPrefix + b.Name }

// ScheduleName is the name of the book's schedule (in the platform's tenant, and in each
// overriding tenant).
func (b Book) ScheduleName() string { return "system." + b.Name }

// intervals are the books' schedules.
var intervals = map[string]time.Duration{
	"retention":      time.Hour,
	"cleanup":        time.Hour,
	"stalled_report": 15 * time.Minute,
}

// Books returns the embedded system playbooks, ordered by name.
func Books() []Book {
	var out []Book
	for name, every := range intervals {
		b, err := files.ReadFile("system/" + name + ".yaml")
		if err != nil {
			panic(fmt.Sprintf("systembook: %s.yaml is not embedded: %v", name, err))
		}
		out = append(out, Book{Name: name, Every: every, Content: string(b)})
	}
	slices.SortFunc(out, func(a, b Book) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// Settings are the deployment's choices the books' schedules carry.
type Settings struct {
	// Tenant is the platform's tenant, whose catalog holds the books.
	Tenant string
	// Retention is how long a terminal execution is kept (system/retention).
	Retention time.Duration
	// TenantRetention sets it for particular tenants.
	TenantRetention map[string]time.Duration
}

// workload is the workload a book's schedule carries.
func (s Settings) workload(name string) map[string]any {
	if name != "retention" {
		return nil
	}
	tenants := map[string]any{}
	for t, d := range s.TenantRetention {
		tenants[t] = d.String()
	}
	return map[string]any{"retention": s.Retention.String(), "tenants": tenants}
}

// Shelf registers the books and their schedules and answers SystemService.
type Shelf struct {
	orchv1.UnimplementedSystemServiceServer

	Catalog   *catalog.Catalog
	Schedules *schedule.Service
	Settings  Settings
	Log       *slog.Logger
}

// Register stores every book as a catalog version of the platform's tenant (a new one only
// when its content changed) and ensures its schedule.
func (s *Shelf) Register(ctx context.Context) error {
	for _, b := range Books() {
		e, err := s.Catalog.Register(ctx, s.Settings.Tenant, b.Content, nil)
		if err != nil {
			return fmt.Errorf("system playbook %s: %w", b.Path(), err)
		}
		changed, err := s.Schedules.Ensure(ctx, schedule.Spec{Tenant: s.Settings.Tenant, Name: b.ScheduleName(), Interval: b.Every, Path: b.Path(),
			Workload: s.Settings.workload(b.Name), CreatedBy: "service:orchestrator"})
		if err != nil {
			return err
		}
		if s.Log != nil {
			s.Log.Info("system playbook registered", slog.String("path", e.Path), slog.Int64("version", e.Version), slog.Bool("schedule_changed", changed))
		}
	}
	return nil
}

// book returns the book of name.
func book(name string) (Book, bool) {
	for _, b := range Books() {
		if b.Name == name {
			return b, true
		}
	}
	return Book{}, false
}

// Registered is called after a playbook was registered: a tenant's override of a system
// playbook gets that playbook's schedule in the tenant, started with the tenant's
// identity (the schedule's own principal there).
func (s *Shelf) Registered(ctx context.Context, e *catalog.Entry) error {
	name, ok := domain.OverrideName(e.Tenant, e.Path)
	if !ok || e.Tenant == s.Settings.Tenant {
		return nil
	}
	b, ok := book(name)
	if !ok {
		return nil
	}
	_, err := s.Schedules.Ensure(ctx, schedule.Spec{Tenant: e.Tenant, Name: b.ScheduleName(), Interval: b.Every, Path: e.Path, CreatedBy: "service:orchestrator"})
	return err
}

// ListSystemPlaybooks implements SystemService.
func (s *Shelf) ListSystemPlaybooks(ctx context.Context, req *orchv1.ListSystemPlaybooksRequest) (*orchv1.ListSystemPlaybooksResponse, error) {
	tenant := "" // every tenant's overrides
	if p := auth.FromContext(ctx); !p.Can(auth.PermSystem) {
		tenant = req.GetTenant() // the caller's own (auth.ScopeTenant set it)
		if tenant == "" {
			tenant = "default"
		}
	}
	overrides, err := s.Catalog.Overrides(ctx, tenant, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListSystemPlaybooksResponse{}
	for _, b := range Books() {
		if req.GetName() != "" && req.GetName() != b.Name {
			continue
		}
		p := &orchv1.SystemPlaybook{Name: b.Name, Path: b.Path(), Tenant: s.Settings.Tenant}
		if e, err := s.Catalog.Get(ctx, s.Settings.Tenant, b.Path(), 0); err == nil {
			p.Version = e.Version
		}
		for _, o := range overrides {
			if o.Name == b.Name && o.Tenant != s.Settings.Tenant {
				p.Overrides = append(p.Overrides, &orchv1.SystemOverride{Tenant: o.Tenant, Path: o.Path, Version: o.Version, CreateTime: timestamppb.New(o.Created)})
			}
		}
		resp.Playbooks = append(resp.Playbooks, p)
	}
	return resp, nil
}

// PlatformTenant is the tenant whose catalog holds the system playbooks: the tenant of the
// bootstrap key, which holds the system role.
const PlatformTenant = "default"

// MinRetention is the shortest retention accepted (sysop.MinRetention).
const MinRetention = sysop.MinRetention

// ParseTenantRetention parses NOETL_TENANT_RETENTION, a JSON object of tenant to
// duration ({"acme": "168h"}); empty is none. Each must be at least MinRetention.
func ParseTenantRetention(s string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf(`not a JSON object of tenant to duration ({"acme": "168h"}): %w`, err)
	}
	for t, v := range raw {
		if err := auth.CheckTenant("tenant", t); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", t, err)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", t, err)
		}
		if err := CheckRetention(d); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", t, err)
		}
		out[t] = d
	}
	return out, nil
}

// CheckRetention refuses a retention shorter than MinRetention.
func CheckRetention(d time.Duration) error {
	if d < MinRetention {
		return fmt.Errorf("retention %s is shorter than the minimum of %s", d, MinRetention)
	}
	return nil
}
