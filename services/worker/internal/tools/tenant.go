package tools

import "context"

// tenantKey carries the tenant of the running command in a context.
type tenantKey struct{}

// WithTenant returns ctx carrying the tenant of the command it runs: tools resolve
// credentials and load stored results for that tenant only.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantOf returns the tenant of the command ctx runs ("" outside a command).
func TenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}
