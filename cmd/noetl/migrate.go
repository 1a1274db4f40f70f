package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/noetl/noetl/internal/schema"
)

// migrateEnv names the variable of the URL a service connects with, which `noetl migrate`
// creates (or updates) the service's login role from: NOETL_MIGRATE_<SERVICE>_URL.
func migrateEnv(service string) string {
	return "NOETL_MIGRATE_" + strings.ToUpper(service) + "_URL"
}

// migrateCmd is `noetl migrate`: the deployment's migrate step (the Helm chart's migrate
// job runs it), once per release, before the services start.
func migrateCmd() *cobra.Command {
	// Flags default to empty, not to the variables: --help prints defaults, and these hold
	// passwords.
	var admin string
	logins := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the Postgres schema migrations, grant each service's role its privileges and create the services' login roles",
		Long: `Apply the Postgres schema migrations, grant each service's group role (noetl_orchestrator,
noetl_materializer, noetl_statebuilder, noetl_resultstore) exactly its privileges, and create
or update the login role of each service whose URL is given (its user and password), as a
member of that group role. Run it once per release before the services start: they no
longer migrate, and refuse a schema older than they need.

The --pg URL's role must own the noetl schema (or be allowed to create it) and may create
roles (CREATEROLE). Pass the URLs in the environment rather than as flags, which other
users of the machine can see.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if admin == "" {
				admin = os.Getenv("NOETL_PG_URL")
			}
			if admin == "" {
				return errors.New("NOETL_PG_URL (--pg) is required: the Postgres URL of a role that owns the noetl schema (or may create it) and may create roles")
			}
			var ls []schema.Login
			for _, s := range schema.Services() {
				if *logins[s] == "" {
					*logins[s] = os.Getenv(migrateEnv(s))
				}
				if *logins[s] == "" {
					continue
				}
				l, err := schema.LoginFromURL(s, *logins[s])
				if err != nil {
					return fmt.Errorf("%s (--%s-url): %w", migrateEnv(s), s, err)
				}
				ls = append(ls, l)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
			if err := schema.Setup(ctx, admin, ls, log); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "schema at version %d; roles granted: ", schema.Version())
			for i, s := range schema.Services() {
				if i > 0 {
					fmt.Fprint(out, ", ")
				}
				fmt.Fprint(out, schema.GroupRole(s))
			}
			fmt.Fprintln(out)
			for _, l := range ls {
				fmt.Fprintf(out, "login %s: %s (member of %s)\n", l.Service, l.User, schema.GroupRole(l.Service))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "pg", "", "Postgres URL of a role that owns the noetl schema and may create roles ($NOETL_PG_URL)")
	for _, s := range schema.Services() {
		logins[s] = new(string)
		cmd.Flags().StringVar(logins[s], s+"-url", "", fmt.Sprintf("URL the %s connects with: its user becomes a login member of %s with its password ($%s)", s, schema.GroupRole(s), migrateEnv(s)))
	}
	return cmd
}
