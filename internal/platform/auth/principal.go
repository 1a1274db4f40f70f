// Package auth is NoETL's identity plumbing shared by the services: the verified caller
// (Principal), its roles and permissions, API key material, and the internal trust that
// carries a principal from the gateway to the internal services in gRPC metadata signed
// with HMAC-SHA256 over a shared secret (NOETL_INTERNAL_SECRET).
//
// The gateway authenticates public callers (API keys, JWT) and forwards the principal it
// verified; internal services admit an RPC only with a valid signed principal (health and
// reflection excepted), so nothing reaches them around the gateway. Internal services
// calling each other sign a service principal with the same secret.
package auth

import (
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Role names. A principal holds one or more.
const (
	// RoleViewer reads: playbooks, executions, events, results.
	RoleViewer = "viewer"
	// RoleOperator reads, starts and cancels executions.
	RoleOperator = "operator"
	// RoleAdmin operates and manages the catalog, credentials and API keys.
	RoleAdmin = "admin"
	// RoleSystem operates and may register and run system playbooks (under system/); it
	// also lets an admin create keys for other tenants.
	RoleSystem = "system"
)

// Roles lists every role.
var Roles = []string{RoleViewer, RoleOperator, RoleAdmin, RoleSystem}

// Permission is what a public RPC needs.
type Permission string

// Permissions, granted by roles.
const (
	// PermRead reads playbooks, executions, events and results.
	PermRead Permission = "read"
	// PermExecute starts and cancels executions.
	PermExecute Permission = "execute"
	// PermAdmin manages the catalog, credentials and API keys.
	PermAdmin Permission = "admin"
	// PermSystem registers and runs system playbooks.
	PermSystem Permission = "system"
)

// grants is what each role permits.
var grants = map[string][]Permission{
	RoleViewer:   {PermRead},
	RoleOperator: {PermRead, PermExecute},
	RoleAdmin:    {PermRead, PermExecute, PermAdmin},
	RoleSystem:   {PermRead, PermExecute, PermSystem},
}

// ValidRole reports whether r names a role.
func ValidRole(r string) bool {
	_, ok := grants[r]
	return ok
}

// Principal is a verified caller.
type Principal struct {
	// Tenant the principal acts for; empty for service principals, which act for the
	// tenant their request names.
	Tenant string `json:"t,omitempty"`
	// Subject identifies the caller: "apikey:<id>", "jwt:<sub>" or "service:<name>".
	Subject string `json:"s"`
	// Roles held by a user principal.
	Roles []string `json:"r,omitempty"`
	// Service marks an internal service acting on the platform's behalf.
	Service bool `json:"svc,omitempty"`
}

// ServicePrincipal returns the principal of the internal service name.
func ServicePrincipal(name string) *Principal {
	return &Principal{Subject: "service:" + name, Service: true}
}

// Can reports whether p holds perm. Service principals hold every permission; a nil
// principal holds none.
func (p *Principal) Can(perm Permission) bool {
	if p == nil {
		return false
	}
	if p.Service {
		return true
	}
	for _, r := range p.Roles {
		if slices.Contains(grants[r], perm) {
			return true
		}
	}
	return false
}

// CanGrant reports whether p may give role r to a key: it must hold every permission r
// grants (an admin grants viewer, operator and admin, not system).
func (p *Principal) CanGrant(r string) bool {
	perms, ok := grants[r]
	if !ok {
		return false
	}
	for _, perm := range perms {
		if !p.Can(perm) {
			return false
		}
	}
	return true
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal in ctx, or nil.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

type serviceCallKey struct{}

// ServiceCall marks ctx so that a forwarding client (Trust.Forward) signs its own service
// principal for calls made without a user principal, for example the gateway verifying an
// API key before it knows the caller.
func ServiceCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, serviceCallKey{}, true)
}

// MaxTenant is the longest tenant name.
const MaxTenant = 128

// CheckTenant returns an InvalidArgument error naming field unless name is a tenant name: 1
// to MaxTenant characters of A-Z, a-z, 0-9, '_', '.' and '-'.
func CheckTenant(field, name string) error {
	if name == "" {
		return status.Errorf(codes.InvalidArgument, "%s: required", field)
	}
	if len(name) > MaxTenant {
		return status.Errorf(codes.InvalidArgument, "%s: %d characters exceeds the limit of %d", field, len(name), MaxTenant)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return status.Errorf(codes.InvalidArgument, "%s: %q may hold only letters, digits, '_', '.' and '-'", field, name)
		}
	}
	return nil
}
