package main

import (
	"bytes"
	"context"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/schema"
	"github.com/noetl/noetl/internal/testkit"
)

// TestMigrateCommand: `noetl migrate` applies the schema and creates the login roles it is
// given URLs of; a service connecting with such a URL passes its start-up check, and the
// command is idempotent. Without a URL to migrate with it says which variable it needs.
func TestMigrateCommand(t *testing.T) {
	t.Setenv("NOETL_PG_URL", "")
	for _, s := range schema.Services() {
		t.Setenv(migrateEnv(s), "")
	}
	admin := testkit.StartPostgres(t)
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.User = url.UserPassword("noetl_statebuilder_login", "migrate-test")
	login := u.String()

	run := func(args ...string) (string, error) {
		cmd := migrateCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	_, err = run()
	require.ErrorContains(t, err, "NOETL_PG_URL (--pg) is required")

	t.Setenv(migrateEnv(schema.Statebuilder), login)
	for range 2 {
		out, err := run("--pg", admin)
		require.NoError(t, err)
		require.Contains(t, out, "schema at version ")
		require.Contains(t, out, "login statebuilder: noetl_statebuilder_login (member of noetl_statebuilder)")
	}
	ctx := context.Background()
	db, err := pgxext.Open(ctx, login, 2)
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, schema.Check(ctx, db, schema.Statebuilder))
}
