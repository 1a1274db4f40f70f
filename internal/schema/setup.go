package schema

import (
	"context"
	"log/slog"

	"github.com/noetl/noetl/internal/platform/pgxext"
)

// Setup is the migrate step of a deployment (`noetl migrate`, the Helm chart's migrate
// job, `noetl dev`, the tests' meshes): it connects to adminURL, applies the migrations and
// the services' privileges (Migrate), then creates or updates the login roles
// (EnsureLogins). adminURL's role owns the noetl schema (or may create it) and may create
// roles.
func Setup(ctx context.Context, adminURL string, logins []Login, log *slog.Logger) error {
	db, err := pgxext.Open(ctx, adminURL, 2)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := Migrate(ctx, db, log); err != nil {
		return err
	}
	return EnsureLogins(ctx, db, logins, log)
}
