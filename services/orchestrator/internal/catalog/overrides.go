package catalog

import (
	"context"
	"time"
)

// Override is the latest version of a tenant's <tenant>/system/<name>.
type Override struct {
	Tenant, Name, Path string
	Version            int64
	Created            time.Time
}

// maxOverrides bounds one listing.
const maxOverrides = 10000

// Overrides returns the tenants' overrides of system playbooks, latest versions, ordered
// by name and tenant: the paths <tenant>/system/<name> registered in that tenant's own
// catalog. tenant and name, when set, narrow the listing.
func (c *Catalog) Overrides(ctx context.Context, tenant, name string) ([]Override, error) {
	rows, err := c.db.Query(ctx, `SELECT DISTINCT ON (tenant, path) tenant, split_part(path, '/', 3), path, version, created_at
		FROM noetl.catalog
		WHERE path LIKE '%/system/%' AND split_part(path, '/', 1) = tenant AND split_part(path, '/', 2) = 'system'
		  AND split_part(path, '/', 3) <> '' AND split_part(path, '/', 4) = ''
		  AND ($1 = '' OR tenant = $1) AND ($2 = '' OR split_part(path, '/', 3) = $2)
		ORDER BY tenant, path, version DESC LIMIT $3`, tenant, name, maxOverrides)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Override
	for rows.Next() {
		var o Override
		if err := rows.Scan(&o.Tenant, &o.Name, &o.Path, &o.Version, &o.Created); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}
