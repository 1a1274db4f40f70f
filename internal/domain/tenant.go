package domain

// DefaultTenant is the tenant of a request that names none.
const DefaultTenant = "default"

// TenantOrDefault is tenant, or DefaultTenant when it is empty.
func TenantOrDefault(tenant string) string {
	if tenant == "" {
		return DefaultTenant
	}
	return tenant
}
