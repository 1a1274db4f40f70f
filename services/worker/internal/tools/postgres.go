package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/noetl/noetl/internal/playbook"
)

// Defaults of the postgres tool.
const (
	// DefaultPostgresStatementTimeout is the statement_timeout unless the tool sets
	// statement_timeout_ms.
	DefaultPostgresStatementTimeout = 60 * time.Second
	// DefaultPostgresMaxRows caps the rows a result may hold unless the tool sets max_rows.
	DefaultPostgresMaxRows = 10000
	// DefaultPostgresMaxPools is the number of connection pools kept (one per DSN).
	DefaultPostgresMaxPools = 16
	// DefaultPostgresMaxConns is the size of each connection pool.
	DefaultPostgresMaxConns = 4
	// postgresConnectTimeout bounds a connection attempt unless the DSN sets one.
	postgresConnectTimeout = 10 * time.Second
)

// Postgres is the postgres tool (kind postgres). It runs the command's statements in
// order in one transaction (rolled back on any failure; a lone statement that cannot
// run in a transaction block, such as VACUUM, is run on its own) and returns the rows
// of the last statement that returned rows (or the last statement's outcome):
//
//	{"rows": [{col: val}...] or [[val...]...], "columns": [...], "row_count": n,
//	 "command": "<last command tag>", "statements": k}
//
// Config keys: command (alias query; several statements separated by ";" run with the
// simple protocol when the text is the playbook's own literal SQL or multi_statement is
// true, else the text runs as exactly one statement with the extended protocol),
// multi_statement (default false), params (positional list bound to $1..$n; needs a
// single statement), auth (credential name resolved through Resolve) or inline
// connection_string / dsn, or host, port, database, user, password, sslmode; schema
// (sets search_path for the transaction), as_objects (default true),
// statement_timeout_ms (default 60000), max_rows (default 10000; a larger result
// fails). Values come back JSON-friendly: integers as int64, numeric as float64 (or a
// string when it has more than 15 significant digits or is NaN/Infinity), timestamps
// as RFC 3339 strings, dates as YYYY-MM-DD, uuid as text, bytea as base64, json and
// jsonb decoded, other types as their text form.
//
// Pools are cached by DSN (at most MaxPools, least recently used closed first); Close
// releases them. Passwords never appear in errors or results, and a DSN without a
// password never picks one up from the environment or a password file.
type Postgres struct {
	// Resolve fetches credentials named by auth; nil means auth cannot be used.
	Resolve CredentialResolver
	// MaxPools bounds the cached pools (default DefaultPostgresMaxPools).
	MaxPools int
	// MaxConns is the size of each pool (default DefaultPostgresMaxConns).
	MaxConns int32

	mu     sync.Mutex
	pools  map[string]*pgPool
	tick   uint64
	closed bool
}

// pgPool is one cached pool with its users count for safe eviction.
type pgPool struct {
	dsn      string
	pool     *pgxpool.Pool
	password string
	users    int
	lastUse  uint64
	evicted  bool
}

// pgRequest is a parsed tool config.
type pgRequest struct {
	sql       string
	params    []any
	schema    string
	asObjects bool
	timeout   time.Duration
	maxRows   int
	// oneStatement makes the SQL run as exactly one statement, with the extended
	// protocol (the server refuses text holding several): the SQL is not the playbook's
	// own literal text and the tool does not set multi_statement: true.
	oneStatement bool
}

// pgResultSet is the outcome of one statement.
type pgResultSet struct {
	columns []string
	rows    []any
	hasRows bool
	tag     pgconn.CommandTag
}

// Run implements Tool.
func (p *Postgres) Run(ctx context.Context, c *Call) (any, error) {
	req, err := parsePGRequest(c.Config)
	if err != nil {
		return nil, err
	}
	dsn, err := p.dsn(ctx, c.Config)
	if err != nil {
		return nil, err
	}
	pp, err := p.acquirePool(dsn)
	if err != nil {
		return nil, err
	}
	defer p.releasePool(pp)
	start := time.Now()
	out, err := p.execute(ctx, pp.pool, req)
	elapsed := time.Since(start).Round(time.Millisecond)
	if err != nil {
		err = pgFailure(ctx, err, pp.password, req)
		c.Log.Diagnostic("postgres: failed after %s: %v", elapsed, err)
		return nil, err
	}
	c.Log.Diagnostic("postgres: %v statement(s) in %s; last: %v; rows: %v", out["statements"], elapsed, out["command"], out["row_count"])
	return out, nil
}

// Close closes the cached pools; pools in use close when their calls finish. Run
// fails after Close.
func (p *Postgres) Close() {
	p.mu.Lock()
	p.closed = true
	var toClose []*pgxpool.Pool
	for k, e := range p.pools {
		e.evicted = true
		if e.users == 0 {
			toClose = append(toClose, e.pool)
		}
		delete(p.pools, k)
	}
	p.mu.Unlock()
	for _, pl := range toClose {
		pl.Close()
	}
}

func parsePGRequest(cfg map[string]any) (*pgRequest, error) {
	fail := func(format string, a ...any) (*pgRequest, error) {
		return nil, &Error{Msg: "postgres: " + fmt.Sprintf(format, a...)}
	}
	sql, _ := cfg["command"].(string)
	if strings.TrimSpace(sql) == "" {
		sql, _ = cfg["query"].(string)
	}
	if strings.TrimSpace(sql) == "" {
		return fail("tool.command (or tool.query) is required")
	}
	r := &pgRequest{sql: sql, asObjects: true, timeout: DefaultPostgresStatementTimeout, maxRows: DefaultPostgresMaxRows}
	switch ps := cfg["params"].(type) {
	case nil:
	case []any:
		r.params = make([]any, len(ps))
		for i, v := range ps {
			r.params[i] = pgParam(v)
		}
	case map[string]any:
		return fail("tool.params must be a positional list ($1, $2, ...), got a map")
	default:
		r.params = []any{pgParam(ps)}
	}
	r.schema = strings.TrimSpace(cfgString(cfg, "schema"))
	var err error
	if r.asObjects, err = cfgBool(cfg["as_objects"], true); err != nil {
		return fail("tool.as_objects: %v", err)
	}
	// Parse accepts only a literal boolean here; anything else did not come from the
	// playbook's author.
	multi, isBool := cfg["multi_statement"].(bool)
	if v := cfg["multi_statement"]; v != nil && !isBool {
		return fail("tool.multi_statement must be true or false, got %v", v)
	}
	r.oneStatement = !multi && !literalSQL(cfg[playbook.SQLLiteralDigestsKey], sql)
	if v, ok := cfg["statement_timeout_ms"]; ok && v != nil {
		f, ok := cfgNumber(v)
		if !ok || f < 0 {
			return fail("tool.statement_timeout_ms must be a non-negative number, got %v", v)
		}
		r.timeout = time.Duration(f) * time.Millisecond
	}
	if v, ok := cfg["max_rows"]; ok && v != nil {
		f, ok := cfgNumber(v)
		if !ok || f < 1 || f > math.MaxInt32 {
			return fail("tool.max_rows must be a positive integer, got %v", v)
		}
		r.maxRows = int(f)
	}
	return r, nil
}

// literalSQL reports whether sql is one of the template-free SQL texts of the tool as
// the playbook wrote them: Parse records their digests under
// playbook.SQLLiteralDigestsKey. Text rendered from a template, or a config that was not
// parsed from a playbook, has no matching digest.
func literalSQL(digests any, sql string) bool {
	list, _ := digests.([]any)
	if len(list) == 0 {
		return false
	}
	want := playbook.SQLTextDigest(sql)
	for _, d := range list {
		if s, ok := d.(string); ok && s == want {
			return true
		}
	}
	return false
}

// pgParam adapts a JSON value for binding: whole numbers become int64 so they bind
// to integer parameters.
func pgParam(v any) any {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return int64(f)
	}
	return v
}

// dsn works out the connection string from the config: an inline connection_string
// or dsn wins, then a connection string in the auth credential, else keyword/value
// parts from the credential overlaid with inline host, port, database, user,
// password and sslmode.
func (p *Postgres) dsn(ctx context.Context, cfg map[string]any) (string, error) {
	if s := cfgString(cfg, "connection_string", "dsn"); s != "" {
		return s, nil
	}
	ra, err := resolveAuth(ctx, p.Resolve, "postgres", cfg["auth"])
	if err != nil {
		return "", err
	}
	var data map[string]any
	if ra != nil {
		data = ra.data
	}
	dsn := pgCredentialDSN(data, cfg)
	if dsn == "" {
		return "", &Error{Msg: "postgres: no connection: set tool.auth to a credential name, or connection_string, or host/database/user"}
	}
	return dsn, nil
}

// pgCredentialDSN is the connection string of postgres credential data: its
// connection_string (dsn, url, uri) as it stands, else keyword/value parameters from its
// fields overlaid with overlay's (a tool's inline host, port, ...); "" when neither names
// any.
func pgCredentialDSN(data, overlay map[string]any) string {
	if s := cfgString(data, "connection_string", "dsn", "url", "uri"); s != "" {
		return s
	}
	parts := map[string]string{}
	collectPGParts(parts, data)
	collectPGParts(parts, overlay)
	if len(parts) == 0 {
		return ""
	}
	return keywordDSN(parts)
}

// keywordDSN writes libpq keyword/value connection parameters, each value quoted. A
// missing password is written empty: the connection never falls back to PGPASSWORD or a
// password file.
func keywordDSN(parts map[string]string) string {
	if _, ok := parts["password"]; !ok {
		parts["password"] = ""
	}
	var b strings.Builder
	for _, k := range []string{"host", "port", "user", "password", "dbname", "sslmode"} {
		v, ok := parts[k]
		if !ok {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteString("='")
		b.WriteString(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v))
		b.WriteByte('\'')
	}
	return b.String()
}

// collectPGParts copies connection parameters from m into parts under libpq names.
func collectPGParts(parts map[string]string, m map[string]any) {
	for k, names := range map[string][]string{
		"host":     {"host", "hostname", "server"},
		"port":     {"port"},
		"user":     {"user", "username"},
		"password": {"password"},
		"dbname":   {"database", "dbname", "db"},
		"sslmode":  {"sslmode"},
	} {
		if v := cfgString(m, names...); v != "" {
			parts[k] = v
		}
	}
}

var kvPasswordRE = regexp.MustCompile(`(^|\s)password\s*=`)

// pgConfig parses a DSN into a pool config (pgConnConfig's connection settings, the
// tool's pool size).
func (p *Postgres) pgConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgConnConfig(dsn)
	if err != nil {
		return nil, err
	}
	maxConns := p.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultPostgresMaxConns
	}
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = 5 * time.Minute
	return cfg, nil
}

// pgConnConfig parses a DSN (keyword/value or URL; pool_* keys are taken out) into the
// connection settings every worker connection to a playbook's Postgres uses: a DSN that
// sets no password gets an empty one, whatever PGPASSWORD or a password file say; a
// connect timeout unless the DSN sets one; application_name noetl-worker unless set; no
// statement or description cache (playbooks change schemas between steps). TLS is the
// DSN's sslmode, as libpq reads it.
func pgConnConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !dsnHasPassword(dsn) {
		cfg.ConnConfig.Password = ""
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = postgresConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "noetl-worker"
	}
	// Describe every statement afresh: playbooks change schemas between steps.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeDescribeExec
	cfg.ConnConfig.StatementCacheCapacity = 0
	cfg.ConnConfig.DescriptionCacheCapacity = 0
	return cfg, nil
}

// dsnHasPassword reports whether a URL or keyword/value DSN sets a password.
func dsnHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return false
		}
		if _, ok := u.User.Password(); ok {
			return true
		}
		return u.Query().Has("password")
	}
	return kvPasswordRE.MatchString(dsn)
}

// acquirePool returns the pool for dsn, creating it (and evicting the least recently
// used idle pool beyond MaxPools) as needed. Callers must releasePool it.
func (p *Postgres) acquirePool(dsn string) (*pgPool, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, &Error{Msg: "postgres: tool is closed"}
	}
	if p.pools == nil {
		p.pools = map[string]*pgPool{}
	}
	p.tick++
	if e, ok := p.pools[dsn]; ok {
		e.users++
		e.lastUse = p.tick
		p.mu.Unlock()
		return e, nil
	}
	p.mu.Unlock()

	cfg, err := p.pgConfig(dsn)
	if err != nil {
		return nil, &Error{Msg: "postgres: bad connection parameters: " + scrub(err.Error(), passwordOf(dsn))}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, &Error{Msg: "postgres: " + scrub(err.Error(), cfg.ConnConfig.Password)}
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pool.Close()
		return nil, &Error{Msg: "postgres: tool is closed"}
	}
	if e, ok := p.pools[dsn]; ok { // another call created it meanwhile
		e.users++
		e.lastUse = p.tick
		p.mu.Unlock()
		pool.Close()
		return e, nil
	}
	e := &pgPool{dsn: dsn, pool: pool, password: cfg.ConnConfig.Password, users: 1, lastUse: p.tick}
	p.pools[dsn] = e
	var toClose []*pgxpool.Pool
	maxPools := p.MaxPools
	if maxPools <= 0 {
		maxPools = DefaultPostgresMaxPools
	}
	for len(p.pools) > maxPools {
		var lru *pgPool
		for _, c := range p.pools {
			if c != e && (lru == nil || c.lastUse < lru.lastUse) {
				lru = c
			}
		}
		if lru == nil {
			break
		}
		delete(p.pools, lru.dsn)
		lru.evicted = true
		if lru.users == 0 {
			toClose = append(toClose, lru.pool)
		}
	}
	p.mu.Unlock()
	for _, pl := range toClose {
		pl.Close()
	}
	return e, nil
}

// releasePool ends one use of a pool, closing it if it was evicted meanwhile.
func (p *Postgres) releasePool(e *pgPool) {
	p.mu.Lock()
	e.users--
	closeIt := e.evicted && e.users == 0
	p.mu.Unlock()
	if closeIt {
		e.pool.Close()
	}
}

// execute runs the request in one transaction. A lone statement that cannot run in a
// transaction block (VACUUM, CREATE INDEX CONCURRENTLY, ...) is run again on its own.
func (p *Postgres) execute(ctx context.Context, pool *pgxpool.Pool, req *pgRequest) (map[string]any, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	out, err := runInTx(ctx, conn.Conn(), req)
	var pgErr *pgconn.PgError
	if err != nil && errors.As(err, &pgErr) && pgErr.Code == "25001" && len(req.params) == 0 &&
		conn.Conn().PgConn().TxStatus() == 'I' {
		return runOutsideTx(ctx, conn.Conn(), req)
	}
	return out, err
}

// runInTx runs the request inside an explicit transaction, rolled back on any error
// (including a result over max_rows).
func runInTx(ctx context.Context, conn *pgx.Conn, req *pgRequest) (_ map[string]any, err error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if err := applySettings(ctx, tx, req, true); err != nil {
		return nil, err
	}
	var sets []*pgResultSet
	switch {
	case len(req.params) > 0:
		rs, err := queryParams(ctx, tx, conn.TypeMap(), req)
		if err != nil {
			return nil, err
		}
		sets = []*pgResultSet{rs}
	case req.oneStatement:
		rs, err := queryOne(ctx, conn.PgConn(), conn.TypeMap(), req)
		if err != nil {
			return nil, err
		}
		sets = []*pgResultSet{rs}
	default:
		if sets, err = querySimple(ctx, conn.PgConn(), conn.TypeMap(), req); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return pgResult(sets), nil
}

// runOutsideTx runs a parameterless command with session settings, reset afterwards;
// the connection is closed (so the pool drops it) if they cannot be reset.
func runOutsideTx(ctx context.Context, conn *pgx.Conn, req *pgRequest) (map[string]any, error) {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.PgConn().Exec(rctx, "RESET statement_timeout; RESET search_path").ReadAll(); err != nil {
			_ = conn.Close(rctx)
		}
	}()
	if err := applySettings(ctx, conn, req, false); err != nil {
		return nil, err
	}
	if req.oneStatement {
		rs, err := queryOne(ctx, conn.PgConn(), conn.TypeMap(), req)
		if err != nil {
			return nil, err
		}
		return pgResult([]*pgResultSet{rs}), nil
	}
	sets, err := querySimple(ctx, conn.PgConn(), conn.TypeMap(), req)
	if err != nil {
		return nil, err
	}
	return pgResult(sets), nil
}

// applySettings sets statement_timeout and, with a schema, search_path, for the
// transaction (local) or the session, binding the values as parameters.
func applySettings(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, req *pgRequest, local bool) error {
	scope := "false"
	if local {
		scope = "true"
	}
	setup := "SELECT set_config('statement_timeout', $1, " + scope + ")"
	args := []any{pgx.QueryExecModeExec, strconv.FormatInt(req.timeout.Milliseconds(), 10)}
	if req.schema != "" {
		var path []string
		for _, s := range strings.Split(req.schema, ",") {
			if s = strings.TrimSpace(s); s != "" {
				path = append(path, pgx.Identifier{s}.Sanitize())
			}
		}
		setup += ", set_config('search_path', $2, " + scope + ")"
		args = append(args, strings.Join(path, ", "))
	}
	_, err := db.Exec(ctx, setup, args...)
	return err
}

// errTooManyRows reports a result over max_rows.
type errTooManyRows struct{ max int }

func (e *errTooManyRows) Error() string {
	return fmt.Sprintf("result has more than %d rows (the max_rows cap); add a LIMIT or raise tool.max_rows", e.max)
}

// queryParams runs one statement with bound parameters (extended protocol, text results).
func queryParams(ctx context.Context, tx pgx.Tx, m *pgtype.Map, req *pgRequest) (*pgResultSet, error) {
	args := append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, req.params...)
	rows, err := tx.Query(ctx, req.sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	rs, over := collectRows(m, req, rows.FieldDescriptions(), rows.Next, rows.RawValues, func() { stopStatement(ctx, tx.Conn().PgConn()) })
	if over {
		return nil, &errTooManyRows{max: req.maxRows}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rs.tag = rows.CommandTag()
	return rs, nil
}

// queryOne runs the SQL as one statement with the extended protocol (no parameters, text
// results). The server parses the whole text first and refuses text that holds several
// statements (SQLSTATE 42601) before running any of them.
func queryOne(ctx context.Context, pc *pgconn.PgConn, m *pgtype.Map, req *pgRequest) (*pgResultSet, error) {
	rr := pc.ExecParams(ctx, req.sql, nil, nil, nil, nil)
	rs, over := collectRows(m, req, rr.FieldDescriptions(), rr.NextRow, rr.Values, func() { stopStatement(ctx, pc) })
	tag, err := rr.Close()
	if over {
		return nil, &errTooManyRows{max: req.maxRows}
	}
	if err != nil {
		return nil, err
	}
	rs.tag = tag
	return rs, nil
}

// collectRows reads a statement's columns and rows (next advances, values reads the row)
// into a result set, keeping at most req.maxRows; over reports that there were more. At
// the first row past the cap it calls stop (stopStatement) and drains what was sent.
func collectRows(m *pgtype.Map, req *pgRequest, fds []pgconn.FieldDescription, next func() bool, values func() [][]byte, stop func()) (rs *pgResultSet, over bool) {
	rs = &pgResultSet{hasRows: len(fds) > 0}
	for _, fd := range fds {
		rs.columns = append(rs.columns, fd.Name)
	}
	for next() {
		if len(rs.rows) >= req.maxRows {
			if !over {
				stop()
			}
			over = true
			continue
		}
		rs.rows = append(rs.rows, decodeRow(m, fds, values(), req.asObjects))
	}
	return rs, over
}

// stopStatement asks the server to cancel the statement running on pc, whose result is
// already over max_rows: a runaway result (generate_series(1, 1e10)) then ends at once
// instead of being read to its end or to statement_timeout. The cancel request returns
// once the server has signalled the backend, so it cannot reach a later statement: a
// backend waiting for its next command ignores a cancel. The caller drains the rows
// already sent and fails the command; the connection stays usable.
func stopStatement(ctx context.Context, pc *pgconn.PgConn) {
	cctx, cancel := context.WithTimeout(ctx, postgresConnectTimeout)
	defer cancel()
	_ = pc.CancelRequest(cctx) // at worst the statement runs on to its end or its timeout
}

// querySimple runs one or more statements with the simple protocol.
func querySimple(ctx context.Context, pc *pgconn.PgConn, m *pgtype.Map, req *pgRequest) ([]*pgResultSet, error) {
	mrr := pc.Exec(ctx, req.sql)
	var sets []*pgResultSet
	over := false
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		rs := &pgResultSet{}
		fds := rr.FieldDescriptions()
		rs.hasRows = len(fds) > 0
		for _, fd := range fds {
			rs.columns = append(rs.columns, fd.Name)
		}
		for rr.NextRow() {
			if over || len(rs.rows) >= req.maxRows {
				if !over {
					stopStatement(ctx, pc)
				}
				over = true
				continue
			}
			rs.rows = append(rs.rows, decodeRow(m, fds, rr.Values(), req.asObjects))
		}
		tag, err := rr.Close()
		if err != nil {
			_ = mrr.Close()
			if over { // the cancel's own error (57014), or one after the cap was passed
				return nil, &errTooManyRows{max: req.maxRows}
			}
			return nil, err
		}
		rs.tag = tag
		sets = append(sets, rs)
	}
	err := mrr.Close()
	if over {
		return nil, &errTooManyRows{max: req.maxRows}
	}
	if err != nil {
		return nil, err
	}
	return sets, nil
}

// pgResult shapes the statements' outcome: rows of the last statement that returned
// rows (else the last statement) and the last command tag.
func pgResult(sets []*pgResultSet) map[string]any {
	out := map[string]any{"rows": []any{}, "columns": []any{}, "row_count": int64(0), "command": "", "statements": len(sets)}
	if len(sets) == 0 {
		return out
	}
	last := sets[len(sets)-1]
	chosen := last
	for i := len(sets) - 1; i >= 0; i-- {
		if sets[i].hasRows {
			chosen = sets[i]
			break
		}
	}
	out["command"] = last.tag.String()
	cols := make([]any, len(chosen.columns))
	for i, c := range chosen.columns {
		cols[i] = c
	}
	out["columns"] = cols
	if chosen.hasRows {
		rows := chosen.rows
		if rows == nil {
			rows = []any{}
		}
		out["rows"] = rows
		out["row_count"] = int64(len(rows))
	} else {
		out["row_count"] = chosen.tag.RowsAffected()
	}
	return out
}

// decodeRow converts one row of text-format values.
func decodeRow(m *pgtype.Map, fds []pgconn.FieldDescription, vals [][]byte, asObjects bool) any {
	if asObjects {
		row := make(map[string]any, len(fds))
		for i, fd := range fds {
			row[fd.Name] = decodeValue(m, fd.DataTypeOID, vals[i])
		}
		return row
	}
	row := make([]any, len(fds))
	for i, fd := range fds {
		row[i] = decodeValue(m, fd.DataTypeOID, vals[i])
	}
	return row
}

// decodeValue converts one text-format value to a JSON-friendly Go value.
func decodeValue(m *pgtype.Map, oid uint32, src []byte) any {
	if src == nil {
		return nil
	}
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.UUIDOID, pgtype.DateOID:
		return string(src)
	case pgtype.NumericOID:
		return numericValue(string(src))
	}
	t, ok := m.TypeForOID(oid)
	if !ok {
		return string(src)
	}
	v, err := t.Codec.DecodeValue(m, oid, pgx.TextFormatCode, src)
	if err != nil {
		return string(src)
	}
	if j, ok := jsonFriendly(v, oid); ok {
		return j
	}
	return string(src)
}

// jsonFriendly converts a decoded value; false when it has no natural JSON form.
func jsonFriendly(v any, oid uint32) (any, bool) {
	switch x := v.(type) {
	case nil, bool, string, int64:
		return x, true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int:
		return int64(x), true
	case uint32:
		return int64(x), true
	case float32:
		return floatValue(float64(x)), true
	case float64:
		if oid == pgtype.JSONOID || oid == pgtype.JSONBOID {
			return x, true
		}
		return floatValue(x), true
	case time.Time:
		if oid == pgtype.DateOID || oid == pgtype.DateArrayOID {
			return x.Format("2006-01-02"), true
		}
		return x.UTC().Format(time.RFC3339Nano), true
	case [16]byte:
		return fmt.Sprintf("%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16]), true
	case []byte:
		return base64.StdEncoding.EncodeToString(x), true
	case pgtype.Numeric:
		dv, err := x.Value()
		if err != nil || dv == nil {
			return nil, err == nil
		}
		return numericValue(fmt.Sprint(dv)), true
	case pgtype.InfinityModifier:
		return x.String(), true
	case map[string]any:
		for k, e := range x {
			x[k], _ = jsonFriendlyNested(e, oid)
		}
		return x, true
	case []any:
		for i, e := range x {
			x[i], _ = jsonFriendlyNested(e, oid)
		}
		return x, true
	}
	return nil, false
}

// jsonFriendlyNested converts an element of an array or JSON document, falling back
// to its printed form.
func jsonFriendlyNested(v any, oid uint32) (any, bool) {
	if j, ok := jsonFriendly(v, oid); ok {
		return j, true
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String(), true
	}
	return fmt.Sprint(v), true
}

// floatValue keeps finite floats and spells NaN and infinities as Postgres does.
func floatValue(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return f
}

// numericValue turns numeric text into a float64 when it has at most 15 significant
// digits (so it round-trips), else keeps the exact text.
func numericValue(s string) any {
	digits := strings.TrimLeft(s, "+-")
	if strings.ContainsAny(digits, "eE") {
		return s
	}
	if i := strings.IndexByte(digits, '.'); i >= 0 {
		digits = digits[:i] + digits[i+1:]
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return s // NaN, Infinity
		}
	}
	digits = strings.Trim(digits, "0")
	if len(digits) > 15 {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return s
	}
	return f
}

// pgFailure turns an error into an *Error naming the problem, without the password.
func pgFailure(ctx context.Context, err error, password string, req *pgRequest) error {
	var te *Error
	if errors.As(err, &te) {
		return &Error{Msg: scrub(te.Msg, password), Retryable: te.Retryable}
	}
	var tooMany *errTooManyRows
	if errors.As(err, &tooMany) {
		return &Error{Msg: "postgres: " + tooMany.Error()}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := fmt.Sprintf("postgres: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		if pgErr.Detail != "" {
			msg += "; detail: " + pgErr.Detail
		}
		if pgErr.Hint != "" {
			msg += "; hint: " + pgErr.Hint
		}
		if pgErr.Code == "42601" && strings.Contains(pgErr.Message, "multiple commands") {
			if len(req.params) > 0 {
				msg += "; tool.params can only be bound to a single statement"
			} else {
				msg += "; " + severalStatementsHint
			}
		}
		var ce *pgconn.ConnectError
		if errors.As(err, &ce) {
			msg = "postgres: connect: " + strings.TrimPrefix(msg, "postgres: ")
		}
		return &Error{Msg: scrub(msg, password), Retryable: pgRetryableCode(pgErr.Code)}
	}
	text := strings.NewReplacer("\n\t", "; ", "\n", "; ").Replace(err.Error())
	if ctx.Err() != nil {
		return &Error{Msg: "postgres: " + scrub(text, password) + " (" + ctx.Err().Error() + ")", Retryable: true}
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	retry := errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed)
	return &Error{Msg: "postgres: " + scrub(text, password), Retryable: retry}
}

// severalStatementsHint explains why SQL that is not the playbook's literal text cannot
// hold several statements, and what to do.
const severalStatementsHint = "the SQL text is not the playbook's own literal text (it holds a template), so it runs as exactly one statement and nothing ran; " +
	"quote values with sql_literal or sql_ident or bind them with tool.params, " +
	"and set tool.multi_statement: true to run several statements of your own"

// pgRetryableCode reports SQLSTATEs worth retrying: connection exceptions,
// serialization failures, deadlocks and server shutdown or overload.
func pgRetryableCode(code string) bool {
	switch code {
	case "40001", "40P01", "57P01", "57P02", "57P03", "53300":
		return true
	}
	return strings.HasPrefix(code, "08")
}

// scrub removes a password (and its URL-escaped forms) from a message.
func scrub(msg, password string) string {
	if len(password) < 4 {
		return msg
	}
	for _, p := range []string{password, url.QueryEscape(password), url.PathEscape(password)} {
		msg = strings.ReplaceAll(msg, p, "********")
	}
	return msg
}

// passwordOf extracts the password a DSN sets, for scrubbing.
func passwordOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
	}
	if i := kvPasswordRE.FindStringIndex(dsn); i != nil {
		rest := strings.TrimLeft(dsn[i[1]:], " ")
		if strings.HasPrefix(rest, "'") {
			var b strings.Builder
			for j := 1; j < len(rest); j++ {
				switch rest[j] {
				case '\\':
					if j+1 < len(rest) {
						j++
						b.WriteByte(rest[j])
					}
				case '\'':
					return b.String()
				default:
					b.WriteByte(rest[j])
				}
			}
			return b.String()
		}
		if k := strings.IndexAny(rest, " \t\n"); k >= 0 {
			return rest[:k]
		}
		return rest
	}
	return ""
}
