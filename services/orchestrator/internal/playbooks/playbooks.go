// Package playbooks is the catalog half of the orchestrator's OrchestratorService:
// registering, reading and listing a tenant's playbooks, over the catalog's store (package
// catalog holds the SQL and the compiled cache).
//
// Invariants: a playbook is stored only once it parses and validates (a playbook.Error is
// InvalidArgument naming its line); only the system role registers under system/, and only
// those playbooks use system_* tool kinds, except a tenant's override of a system playbook,
// which needs the admin role and may use playbook.TenantSafeToolKinds; wasm steps name
// plug-ins the tenant has.
package playbooks

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/plugin"
)

// Service implements the catalog RPCs of OrchestratorService (RegisterPlaybook,
// GetPlaybook, ListPlaybooks).
type Service struct {
	Catalog *catalog.Catalog
	// Registered, when set, is called after a playbook was registered (a tenant's override
	// of a system playbook gets its schedule there, package systembook).
	Registered func(ctx context.Context, e *catalog.Entry) error
	// Plugins, when set, checks the wasm steps of a playbook being registered against the
	// tenant's plug-ins.
	Plugins *plugin.Service
}

// RegisterPlaybook validates and stores a playbook.
func (s *Service) RegisterPlaybook(ctx context.Context, req *orchv1.RegisterPlaybookRequest) (*orchv1.RegisterPlaybookResponse, error) {
	if len(req.GetContent()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "content: playbook YAML is required")
	}
	tenant := domain.TenantOrDefault(req.GetTenant())
	e, err := s.Catalog.Register(ctx, tenant, req.GetContent(), func(pb *playbook.Playbook, path string) error {
		if err := systemGuard(ctx, tenant, pb, path); err != nil || s.Plugins == nil {
			return err
		}
		return s.Plugins.CheckSteps(ctx, tenant, pb, path)
	})
	if err != nil {
		var pe *playbook.Error
		if errors.As(err, &pe) {
			return nil, status.Error(codes.InvalidArgument, "invalid playbook: "+err.Error())
		}
		return nil, err
	}
	if s.Registered != nil {
		if err := s.Registered(ctx, e); err != nil {
			return nil, status.Errorf(codes.Unavailable, "playbook %s version %d registered, but its schedule was not: %v; register it again", e.Path, e.Version, err)
		}
	}
	return &orchv1.RegisterPlaybookResponse{Entry: entryProto(e, true)}, nil
}

func entryProto(e *catalog.Entry, content bool) *orchv1.CatalogEntry {
	p := &orchv1.CatalogEntry{Tenant: e.Tenant, Path: e.Path, Version: e.Version, Name: e.Name, Description: e.Description, Warnings: e.Warnings, CreateTime: timestamppb.New(e.Created), ContentSha256: e.SHA256}
	if content {
		p.Content = e.Content
	}
	return p
}

// GetPlaybook returns a catalog entry.
func (s *Service) GetPlaybook(ctx context.Context, req *orchv1.GetPlaybookRequest) (*orchv1.GetPlaybookResponse, error) {
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	e, err := s.Catalog.Get(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetPath(), req.GetVersion())
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q (version %d) not found", req.GetPath(), req.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.GetPlaybookResponse{Entry: entryProto(e, true)}, nil
}

// ListPlaybooks returns a page of the catalog.
func (s *Service) ListPlaybooks(ctx context.Context, req *orchv1.ListPlaybooksRequest) (*orchv1.ListPlaybooksResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	if n > 500 {
		n = 500
	}
	if req.GetPath() != "" {
		return s.listVersions(ctx, req, n)
	}
	es, err := s.Catalog.List(ctx, domain.TenantOrDefault(req.GetTenant()), n, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListPlaybooksResponse{}
	for _, e := range es {
		resp.Entries = append(resp.Entries, entryProto(e, false))
	}
	if len(es) == n {
		resp.NextPageToken = es[len(es)-1].Path
	}
	return resp, nil
}

// listVersions is ListPlaybooks for one path: its versions, newest first, n per page; the
// page token is the last version returned.
func (s *Service) listVersions(ctx context.Context, req *orchv1.ListPlaybooksRequest, n int) (*orchv1.ListPlaybooksResponse, error) {
	var before int64
	if t := req.GetPageToken(); t != "" {
		v, err := strconv.ParseInt(t, 10, 64)
		if err != nil || v <= 0 {
			return nil, status.Errorf(codes.InvalidArgument, "page_token: %q is not a token of this listing", t)
		}
		before = v
	}
	es, err := s.Catalog.Versions(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetPath(), n, before)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q not found", req.GetPath())
	}
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListPlaybooksResponse{}
	for _, e := range es {
		resp.Entries = append(resp.Entries, entryProto(e, false))
	}
	if len(es) == n && es[len(es)-1].Version > 1 {
		resp.NextPageToken = strconv.FormatInt(es[len(es)-1].Version, 10)
	}
	return resp, nil
}

// systemGuard enforces the system pool's rules at registration: only the system role
// registers playbooks under system/, and only those may use system_* tool kinds, except
// that a tenant's override of a system playbook (<tenant>/system/<name> in its own
// catalog), which needs the admin role, may use playbook.TenantSafeToolKinds.
func systemGuard(ctx context.Context, tenant string, pb *playbook.Playbook, path string) error {
	system := domain.PoolFor(path) == "system"
	if system && !auth.FromContext(ctx).Can(auth.PermSystem) {
		return status.Errorf(codes.PermissionDenied, "metadata.path: registering system/ playbooks requires the system role")
	}
	if system {
		return nil
	}
	_, override := domain.OverrideName(tenant, path)
	allowed := func(kind string) bool {
		return !strings.HasPrefix(kind, "system_") || (override && slices.Contains(playbook.TenantSafeToolKinds, kind))
	}
	uses := false
	for _, st := range pb.Steps {
		for _, t := range st.Tool {
			if !allowed(t.Kind) {
				return status.Errorf(codes.InvalidArgument, "line %d: step %q: tool kind %q is reserved for system/ playbooks%s", st.Line, st.Name, t.Kind, tenantSafeHint(override))
			}
			uses = uses || strings.HasPrefix(t.Kind, "system_")
		}
	}
	for name, t := range pb.Workbook {
		if !allowed(t.Kind) {
			return status.Errorf(codes.InvalidArgument, "workbook task %q: tool kind %q is reserved for system/ playbooks%s", name, t.Kind, tenantSafeHint(override))
		}
		uses = uses || strings.HasPrefix(t.Kind, "system_")
	}
	if uses && !auth.FromContext(ctx).Can(auth.PermAdmin) {
		return status.Errorf(codes.PermissionDenied, "metadata.path: registering an override of a system playbook (%s) requires the admin role", path)
	}
	return nil
}

// tenantSafeHint names the system tools an override of a system playbook may use.
func tenantSafeHint(override bool) string {
	if !override {
		return ""
	}
	return " (an override of a system playbook may use " + strings.Join(playbook.TenantSafeToolKinds, ", ") + ")"
}
