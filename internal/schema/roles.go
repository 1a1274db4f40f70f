package schema

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The services that connect to Postgres, each as a role of its own. The gateway and the
// workers have no database credentials at all.
const (
	Orchestrator = "orchestrator"
	Materializer = "materializer"
	Statebuilder = "statebuilder"
	Resultstore  = "resultstore"
)

// Services returns the services that connect to Postgres.
func Services() []string {
	return []string{Orchestrator, Materializer, Statebuilder, Resultstore}
}

// GroupRole returns the name of a service's group role, noetl_<service>: a NOLOGIN role
// that holds the service's privileges. The role a service logs in as is a member of it.
func GroupRole(service string) string { return "noetl_" + service }

// Grant is the privileges a service's group role holds on one table of schema noetl.
type Grant struct {
	// Service is the service (Orchestrator, ...).
	Service string
	// Table is the table's name in schema noetl.
	Table string
	// Privileges are SELECT, INSERT, UPDATE and DELETE, as the service needs them.
	Privileges []string
}

// grants is the privilege matrix, read from the SQL each service runs. SELECT ... FOR
// UPDATE needs UPDATE, and INSERT ... ON CONFLICT DO UPDATE needs SELECT and UPDATE.
var grants = []Grant{
	// The catalog, credentials and API keys are the orchestrator's.
	{Orchestrator, "catalog", []string{"SELECT", "INSERT"}},
	{Orchestrator, "credential", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{Orchestrator, "api_key", []string{"SELECT", "INSERT", "UPDATE"}},
	// Schedules and their ticks are the orchestrator's own rows (package schedule).
	{Orchestrator, "schedule", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{Orchestrator, "schedule_tick", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// Triggers are the orchestrator's own rows (package trigger).
	{Orchestrator, "trigger", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// WebAssembly plug-in versions are the orchestrator's, immutable like the catalog's.
	{Orchestrator, "plugin", []string{"SELECT", "INSERT"}},
	// The materializer is the sole writer of the log, which it only appends to, and of the
	// projections it updates in the same transaction; the lease tables are its own.
	{Materializer, "event", []string{"SELECT", "INSERT"}},
	{Materializer, "execution", []string{"SELECT", "INSERT", "UPDATE"}},
	{Materializer, "timer", []string{"SELECT", "INSERT", "UPDATE"}},
	{Materializer, "materializer_replica", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{Materializer, "materializer_partition", []string{"SELECT", "INSERT", "UPDATE"}},
	// The statebuilder reads the log and the projections and keeps its snapshots.
	{Statebuilder, "event", []string{"SELECT"}},
	{Statebuilder, "execution", []string{"SELECT"}},
	{Statebuilder, "timer", []string{"SELECT"}},
	{Statebuilder, "state_snapshot", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	// The resultstore keeps results.
	{Resultstore, "result", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{Resultstore, "result_chunk", []string{"SELECT", "INSERT", "DELETE"}},
}

// FunctionGrant is a function of schema noetl one service's group role may execute.
type FunctionGrant struct {
	// Service is the service (Materializer, ...).
	Service string
	// Function is the function's signature in schema noetl, e.g. purge_executions(text[]).
	Function string
}

// functionGrants are the functions the services may call. noetl.purge_executions deletes
// terminal executions with their events (retention): only the materializer, the log's
// sole writer, may call it, and no role may DELETE from noetl.event itself.
// noetl.writer_expect guards the materializer's one-round-trip commits.
var functionGrants = []FunctionGrant{
	{Materializer, "purge_executions(text[])"},
	{Materializer, "writer_expect(boolean)"},
}

// FunctionGrants returns the functions of schema noetl the services' group roles may
// execute; the migrate step grants exactly these.
func FunctionGrants() []FunctionGrant { return slices.Clone(functionGrants) }

// Grants returns the table privileges of the services' group roles. The migrate step gives
// each group role exactly these and revokes any other it holds on a table or sequence of
// schema noetl. Only the materializer may write noetl.event, and only by INSERT: the log
// is append-only for every role but its owner.
func Grants() []Grant {
	out := make([]Grant, len(grants))
	for i, g := range grants {
		out[i] = Grant{g.Service, g.Table, slices.Clone(g.Privileges)}
	}
	return out
}

// groupRoles is the group role of every service, SQL-quoted and comma-separated.
func groupRoles() string {
	var names []string
	for _, s := range Services() {
		names = append(names, pgx.Identifier{GroupRole(s)}.Sanitize())
	}
	return strings.Join(names, ", ")
}

// grant creates the group roles that do not exist yet and sets their privileges to the
// matrix, in one transaction: a running service never sees a privilege missing.
func grant(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	for _, s := range Services() {
		if err := createGroupRole(ctx, pool, GroupRole(s), log); err != nil {
			return err
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	roles := groupRoles()
	stmts := []string{
		"GRANT USAGE ON SCHEMA noetl TO " + roles,
		"REVOKE ALL ON ALL TABLES IN SCHEMA noetl FROM " + roles,
		"REVOKE ALL ON ALL SEQUENCES IN SCHEMA noetl FROM " + roles,
		"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA noetl FROM " + roles,
		// The services check the schema's version at start.
		"GRANT SELECT ON " + VersionTable + " TO " + roles,
		// Functions the migrations create are callable by no one but their owner unless
		// granted (Postgres lets PUBLIC execute new functions by default).
		"ALTER DEFAULT PRIVILEGES IN SCHEMA noetl REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC",
	}
	for _, g := range grants {
		table := pgx.Identifier{"noetl", g.Table}.Sanitize()
		role := pgx.Identifier{GroupRole(g.Service)}.Sanitize()
		stmts = append(stmts, "GRANT "+strings.Join(g.Privileges, ", ")+" ON "+table+" TO "+role)
		if slices.Contains(g.Privileges, "INSERT") {
			// A serial column's default calls nextval on its sequence, which needs USAGE.
			seqs, err := ownedSequences(ctx, tx, g.Table)
			if err != nil {
				return err
			}
			for _, seq := range seqs {
				stmts = append(stmts, "GRANT USAGE ON SEQUENCE "+pgx.Identifier{"noetl", seq}.Sanitize()+" TO "+role)
			}
		}
	}
	for _, f := range functionGrants {
		stmts = append(stmts, "GRANT EXECUTE ON FUNCTION noetl."+f.Function+" TO "+pgx.Identifier{GroupRole(f.Service)}.Sanitize())
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("grant: %s: %w", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if log != nil {
		log.Info("service roles granted", slog.String("roles", roles))
	}
	return nil
}

// ownedSequences returns the sequences of schema noetl owned by a column of table (serial
// and identity columns).
func ownedSequences(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT s.relname FROM pg_class s
		JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = s.oid AND d.deptype IN ('a', 'i')
		JOIN pg_class t ON t.oid = d.refobjid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE s.relkind = 'S' AND n.nspname = 'noetl' AND t.relname = $1 ORDER BY 1`, table)
	if err != nil {
		return nil, fmt.Errorf("grant: sequences of noetl.%s: %w", table, err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("grant: sequences of noetl.%s: %w", table, err)
	}
	return seqs, nil
}

// createGroupRole creates a NOLOGIN role unless it exists. Roles belong to the whole
// Postgres cluster, not to one database, so migrations of two databases of one cluster
// may race to create it: the loser finds it there.
func createGroupRole(ctx context.Context, pool *pgxpool.Pool, role string, log *slog.Logger) error {
	for attempt := 0; ; attempt++ {
		var super, exists bool
		err := pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, role).Scan(&super)
		switch {
		case err == nil:
			exists = true
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("role %s: %w", role, err)
		}
		if exists {
			if super {
				return fmt.Errorf("role %s is a superuser: it must hold only its service's privileges (ALTER ROLE %s NOSUPERUSER)", role, role)
			}
			return nil
		}
		_, err = pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" NOLOGIN")
		if err == nil {
			if log != nil {
				log.Info("role created", slog.String("role", role))
			}
			return nil
		}
		if attempt < 5 && raced(err) {
			continue
		}
		return fmt.Errorf("create role %s (the migrating role needs CREATEROLE, or a DBA creates the role NOLOGIN): %w", role, err)
	}
}

// raced reports whether err is what Postgres answers when another session changed the
// same role at the same time (roles are shared by every database of a cluster).
func raced(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "42710", "23505", "40001", "40P01": // duplicate_object, unique_violation, serialization_failure, deadlock_detected
		return true
	case "XX000": // "tuple concurrently updated"
		return strings.Contains(pe.Message, "concurrently")
	}
	return false
}

// Login is a role a service connects to Postgres as: a LOGIN member of the service's group
// role, inheriting its privileges and holding no other.
type Login struct {
	// Service is the service (Orchestrator, ...).
	Service string
	// User is the role's name.
	User string
	// Password is its password; empty leaves the password as it is (for servers that
	// authenticate the role otherwise: certificates, trust on a private cluster).
	Password string
}

// LoginFromURL returns the login of service in a Postgres URL: its user and password.
func LoginFromURL(service, url string) (Login, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return Login{}, fmt.Errorf("postgres url of the %s: %w", service, err)
	}
	return Login{Service: service, User: cfg.User, Password: cfg.Password}, nil
}

// EnsureLogins creates each login's role (LOGIN, with its password) or updates an existing
// one's password, and makes it a member of its service's group role (Migrate creates the
// group roles, so it runs first). A login that would hold privileges beyond its service's
// is refused, naming it: a superuser, a role that bypasses row security, the role running
// the migration, a member of the owner of schema noetl or of one of its tables, a member
// of another service's group role, or the same user for two services.
//
// Passwords reach Postgres as SCRAM-SHA-256 verifiers, never in clear text (the server's
// statement log would keep them), unless they hold characters other than printable ASCII.
func EnsureLogins(ctx context.Context, pool *pgxpool.Pool, logins []Login, log *slog.Logger) error {
	seen := map[string]string{}
	for _, l := range logins {
		if !slices.Contains(Services(), l.Service) {
			return fmt.Errorf("login %q: unknown service %q (known: %s)", l.User, l.Service, strings.Join(Services(), ", "))
		}
		if l.User == "" {
			return fmt.Errorf("login of the %s: the URL names no user", l.Service)
		}
		if other, ok := seen[l.User]; ok {
			return fmt.Errorf("login %q is given for the %s and the %s: each service needs a role of its own", l.User, other, l.Service)
		}
		seen[l.User] = l.Service
		if slices.ContainsFunc(Services(), func(s string) bool { return GroupRole(s) == l.User }) {
			return fmt.Errorf("login of the %s: %q is a group role (NOLOGIN); choose another user, e.g. %s_login", l.Service, l.User, GroupRole(l.Service))
		}
	}
	for _, l := range logins {
		var err error
		for attempt := 0; ; attempt++ {
			if err = ensureLogin(ctx, pool, l); err == nil || attempt == 5 || !raced(err) {
				break
			}
		}
		if err != nil {
			return err
		}
		if log != nil {
			log.Info("login role ready", slog.String("service", l.Service), slog.String("role", l.User))
		}
	}
	return nil
}

func ensureLogin(ctx context.Context, pool *pgxpool.Pool, l Login) error {
	group := GroupRole(l.Service)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var super, bypass, self bool
	err = tx.QueryRow(ctx, `SELECT rolsuper, rolbypassrls, rolname = current_user FROM pg_roles WHERE rolname = $1`, l.User).Scan(&super, &bypass, &self)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("login %q: %w", l.User, err)
	}
	if exists {
		why := ""
		switch {
		case self:
			why = "is the role running the migration"
		case super:
			why = "is a superuser"
		case bypass:
			why = "bypasses row security"
		}
		if why == "" {
			var owner, other string
			if err := tx.QueryRow(ctx, `SELECT
				coalesce((SELECT pg_get_userbyid(o.owner) FROM (
					SELECT nspowner AS owner FROM pg_namespace WHERE nspname = 'noetl'
					UNION ALL SELECT c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'noetl'
				) o WHERE pg_has_role($1, o.owner, 'MEMBER') LIMIT 1), ''),
				coalesce((SELECT min(rolname::text) FROM pg_roles WHERE rolname::text = ANY ($2::text[]) AND pg_has_role($1, oid, 'MEMBER')), '')`,
				l.User, otherGroups(l.Service)).Scan(&owner, &other); err != nil {
				return fmt.Errorf("login %q: %w", l.User, err)
			}
			switch {
			case owner != "":
				why = fmt.Sprintf("is (a member of) %s, which owns the noetl schema or its tables", owner)
			case other != "":
				why = fmt.Sprintf("is a member of %s, another service's role", other)
			}
		}
		if why != "" {
			return fmt.Errorf("login of the %s: role %q %s; a service must connect as a role of its own that holds only its service's privileges", l.Service, l.User, why)
		}
	}
	verb := "CREATE"
	if exists {
		verb = "ALTER"
	}
	var stmt string
	if l.Password == "" {
		err = tx.QueryRow(ctx, `SELECT format('%s ROLE %I LOGIN', $1::text, $2::text)`, verb, l.User).Scan(&stmt)
	} else {
		err = tx.QueryRow(ctx, `SELECT format('%s ROLE %I LOGIN PASSWORD %L', $1::text, $2::text, $3::text)`, verb, l.User, verifier(l.Password)).Scan(&stmt)
	}
	if err != nil {
		return fmt.Errorf("login %q: %w", l.User, err)
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("login of the %s: %s role %q: %w", l.Service, strings.ToLower(verb), l.User, err)
	}
	var member bool
	if err := tx.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER')`, l.User, group).Scan(&member); err != nil {
		return fmt.Errorf("login %q: %w", l.User, err)
	}
	if !member {
		if _, err := tx.Exec(ctx, "GRANT "+pgx.Identifier{group}.Sanitize()+" TO "+pgx.Identifier{l.User}.Sanitize()); err != nil {
			return fmt.Errorf("login of the %s: grant %s to %q: %w", l.Service, group, l.User, err)
		}
	}
	var inherits bool
	if err := tx.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'USAGE')`, l.User, group).Scan(&inherits); err != nil {
		return fmt.Errorf("login %q: %w", l.User, err)
	}
	if !inherits {
		return fmt.Errorf("login of the %s: role %q does not inherit the privileges of %s (ALTER ROLE %s INHERIT)", l.Service, l.User, group, l.User)
	}
	return tx.Commit(ctx)
}

// otherGroups returns the group roles of the services other than service.
func otherGroups(service string) []string {
	var out []string
	for _, s := range Services() {
		if s != service {
			out = append(out, GroupRole(s))
		}
	}
	return out
}

// verifier returns the SCRAM-SHA-256 verifier Postgres stores for password (as Postgres
// computes it: 4096 iterations, a random 16-byte salt), or password itself when it holds
// anything but printable ASCII (Postgres normalises such passwords with SASLprep first,
// so it hashes them itself).
func verifier(password string) string {
	for _, r := range password {
		if r < 0x21 || r > 0x7e {
			return password
		}
	}
	const iterations = 4096
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return password
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(mac(salted, "Server Key")))
}

// LoginRole returns the name NoETL's own tooling gives a service's login role,
// noetl_<service>_login: `noetl dev`, the tests and the Helm chart's default.
func LoginRole(service string) string { return GroupRole(service) + "_login" }
