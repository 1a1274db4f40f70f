package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Check is what a service verifies once connected, before it serves: the database holds
// the schema at Version or later (else the error names the version found and asks for
// `noetl migrate`), and the role the service connects as holds its service's privileges
// and, unless the service is the materializer, cannot write noetl.event (a superuser, the
// schema's owner or another service's role would defeat the sole writer).
func Check(ctx context.Context, db *pgxpool.Pool, service string) error {
	var user, database string
	if err := db.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&user, &database); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	var have int64
	err := db.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+VersionTable).Scan(&have)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return fmt.Errorf("postgres database %q holds no NoETL schema (no table %s): run `noetl migrate` (the Helm chart's migrate job) before starting the %s", database, VersionTable, service)
	case errors.As(err, &pe) && pe.Code == "42501": // insufficient_privilege
		return fmt.Errorf("postgres role %q may not read %s: the %s must connect as a login of role %s, which `noetl migrate` creates and grants (see the database roles in docs/operations.md)", user, VersionTable, service, GroupRole(service))
	case err != nil:
		return fmt.Errorf("postgres schema version: %w", err)
	}
	if have < Version() {
		return fmt.Errorf("postgres database %q holds NoETL schema version %d, this %s needs %d: run `noetl migrate` (the Helm chart's migrate job) first", database, have, service, Version())
	}
	var missing []string
	for _, g := range grants {
		if g.Service != service {
			continue
		}
		for _, p := range g.Privileges {
			var ok bool
			if err := db.QueryRow(ctx, `SELECT has_table_privilege($1, $2)`, "noetl."+g.Table, p).Scan(&ok); err != nil {
				return fmt.Errorf("postgres privileges: %w", err)
			}
			if !ok {
				missing = append(missing, p+" on noetl."+g.Table)
			}
		}
	}
	for _, f := range functionGrants {
		if f.Service != service {
			continue
		}
		var ok bool
		if err := db.QueryRow(ctx, `SELECT has_function_privilege($1, 'EXECUTE')`, "noetl."+f.Function).Scan(&ok); err != nil {
			return fmt.Errorf("postgres privileges: %w", err)
		}
		if !ok {
			missing = append(missing, "EXECUTE on noetl."+f.Function)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("postgres role %q lacks %s: the %s must connect as a login of role %s, which `noetl migrate` grants", user, strings.Join(missing, ", "), service, GroupRole(service))
	}
	if service == Materializer {
		return nil
	}
	var writes bool
	if err := db.QueryRow(ctx, `SELECT has_table_privilege('noetl.event', 'INSERT, UPDATE, DELETE, TRUNCATE')`).Scan(&writes); err != nil {
		return fmt.Errorf("postgres privileges: %w", err)
	}
	if !writes {
		// The purge function deletes from the log: executing it is writing it.
		if err := db.QueryRow(ctx, `SELECT has_function_privilege('noetl.purge_executions(text[])', 'EXECUTE')`).Scan(&writes); err != nil {
			return fmt.Errorf("postgres privileges: %w", err)
		}
	}
	if writes {
		return fmt.Errorf("postgres role %q may write noetl.event, which only the materializer writes: connect the %s as a login of role %s, holding only its privileges (a superuser or the schema's owner holds them all; see the database roles in docs/operations.md)", user, service, GroupRole(service))
	}
	return nil
}
