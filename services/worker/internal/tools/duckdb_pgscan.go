//go:build cgo

package tools

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgtype"
)

// The worker's own Postgres scanner for the duckdb tool, used when DuckDB's postgres
// extension cannot be loaded. It registers two table functions on the command's DuckDB
// database, named and ordered as the extension's:
//
//	postgres_scan('<alias>', '<schema>', '<table>')  -- the table's rows
//	postgres_query('<alias>', '<sql>')               -- the rows of one query run in Postgres
//
// and attaches, under each alias, an in-memory catalog holding for every table and view
// the credential can see a schema and a VIEW over postgres_scan, so <alias>.<schema>.<table>
// reads the Postgres table. Invariants:
//
//   - Reads only: every scan runs in a READ ONLY transaction (a transaction, not a
//     startup parameter, so it also holds behind a pooler such as PgBouncer), and a
//     postgres_query statement that returns no columns is refused at bind.
//   - Column types come from Postgres at bind (the catalog read at attach, or a describe);
//     rows stream from one connection per running scan (nothing is held beyond a row),
//     and a scan reads from Postgres only the columns the query uses (projection
//     pushdown); filters run in DuckDB (postgres_query pushes a whole query down).
//   - A scan runs under the DuckDB statement's context: the statement timeout and the
//     command's cancellation stop it, and a scan the statement left unfinished (a LIMIT)
//     has its connection closed when the statement ends. Every connection is closed when
//     the command ends.
//   - The functions hold no state: they find the command's scanner in the statement's
//     context, so a DuckDB instance two commands share (one database file) never lets one
//     command read through another's credential.
//   - No message carries a credential's password.

// pgScannerKey is the context key under which a command's statements carry its scanner.
type pgScannerKey struct{}

// pgScanner is one command's set of attached Postgres databases.
type pgScanner struct {
	mu      sync.Mutex
	sources map[string]*pgSource // by alias, as DuckDB folds it (lower case)
	closed  bool
	// jsonType is DuckDB's JSON type (VARCHAR with the JSON alias), nil if unavailable.
	jsonType duckdb.TypeInfo
}

// pgSource is one attached credential.
type pgSource struct {
	alias    string
	label    string // auth "name", for messages
	config   *pgx.ConnConfig
	password string
	// tables are the relations read at attach, by schema and name; guarded by pgScanner.mu.
	tables map[[2]string]*pgRelation
	idle   []*pgx.Conn
	open   map[*pgx.Conn]struct{}
}

// pgRelation is a table or view's columns and row estimate.
type pgRelation struct {
	cols []pgColumn
	rows float64 // pg_class.reltuples; <= 0 when unknown
}

// pgColumn is one Postgres column and the DuckDB type it reads as.
type pgColumn struct {
	name string
	typ  pgDuckType
}

// pgValueKind says how a decoded Postgres value becomes the DuckDB column's value.
type pgValueKind int

const (
	pgAsIs      pgValueKind = iota // bool, ints, floats, strings, bytes, timestamps, dates
	pgDecimal                      // numeric(p,s) -> DECIMAL(p,s)
	pgDouble                       // unconstrained numeric -> DOUBLE
	pgTimeOfDay                    // time -> TIME
	pgUUID                         // uuid -> UUID
	pgJSON                         // json, jsonb: their text, as DuckDB JSON
	pgText                         // any other type: its text form, as VARCHAR
	pgList                         // a one-dimensional array of a mapped type -> LIST
)

// pgDuckType is a column's DuckDB type and how its values convert.
type pgDuckType struct {
	info         duckdb.TypeInfo
	kind         pgValueKind
	width, scale uint8       // pgDecimal
	elem         *pgDuckType // pgList
}

// textFormat reports whether the column is read in Postgres's text format.
func (t pgDuckType) textFormat() bool { return t.kind == pgText || t.kind == pgJSON }

// newPGScanner registers the scanner's table functions on conn's database and returns
// an empty scanner; close it when the command ends.
func newPGScanner(ctx context.Context, conn *sql.Conn) (*pgScanner, error) {
	s := &pgScanner{sources: map[string]*pgSource{}}
	s.jsonType = duckJSONType(ctx, conn)
	text := mustType(duckdb.TYPE_VARCHAR)
	scan := duckdb.RowTableFunction{
		Config: duckdb.TableFunctionConfig{Arguments: []duckdb.TypeInfo{text, text, text}},
		BindArgumentsContext: func(ctx context.Context, _ map[string]any, args ...any) (duckdb.RowTableSource, error) {
			return bindPGScan(ctx, args)
		},
	}
	if err := duckdb.RegisterTableUDF(conn, "postgres_scan", scan); err != nil {
		return nil, fmt.Errorf("register postgres_scan: %w", err)
	}
	query := duckdb.RowTableFunction{
		Config: duckdb.TableFunctionConfig{Arguments: []duckdb.TypeInfo{text, text}},
		BindArgumentsContext: func(ctx context.Context, _ map[string]any, args ...any) (duckdb.RowTableSource, error) {
			return bindPGQuery(ctx, args)
		},
	}
	if err := duckdb.RegisterTableUDF(conn, "postgres_query", query); err != nil {
		return nil, fmt.Errorf("register postgres_query: %w", err)
	}
	return s, nil
}

// duckJSONType asks DuckDB for its JSON type: the public constructors make no aliased
// VARCHAR. Nil when the database has none.
func duckJSONType(ctx context.Context, conn *sql.Conn) duckdb.TypeInfo {
	var info duckdb.TypeInfo
	_ = conn.Raw(func(dc any) error {
		c, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return nil
		}
		st, err := c.PrepareContext(ctx, "SELECT NULL::JSON")
		if err != nil {
			return nil
		}
		defer func() { _ = st.Close() }()
		if ds, ok := st.(*duckdb.Stmt); ok {
			if ti, err := ds.ColumnTypeInfo(0); err == nil && ti.Alias() != "" {
				info = ti
			}
		}
		return nil
	})
	return info
}

// mustType is the TypeInfo of a primitive DuckDB type.
func mustType(t duckdb.Type) duckdb.TypeInfo {
	info, err := duckdb.NewTypeInfo(t)
	if err != nil {
		panic(fmt.Sprintf("duckdb primitive type %v: %v", t, err)) // a constant of this file; never bad input
	}
	return info
}

// attach connects with the credential's connection settings, reads the relations it can
// see, and creates the catalog alias with a view over postgres_scan for each.
func (s *pgScanner) attach(ctx context.Context, conn *sql.Conn, alias, label string, cc *pgx.ConnConfig, password string) error {
	cc = cc.Copy()
	// A cancelled statement is cancelled in Postgres too, not only abandoned.
	cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Second}
	}
	src := &pgSource{alias: alias, label: label, config: cc, password: password, tables: map[[2]string]*pgRelation{}, open: map[*pgx.Conn]struct{}{}}
	key := strings.ToLower(alias)
	s.mu.Lock()
	if _, dup := s.sources[key]; dup {
		s.mu.Unlock()
		return fmt.Errorf("alias %s is attached already", duckIdent(alias))
	}
	s.sources[key] = src
	s.mu.Unlock()

	pc, err := s.acquire(ctx, src)
	if err != nil {
		return err
	}
	tables, err := s.readCatalog(ctx, pc)
	if err != nil {
		s.discard(src, pc)
		return scrubErr(err, password)
	}
	s.release(src, pc)
	s.mu.Lock()
	src.tables = tables
	s.mu.Unlock()

	stmts := []string{"ATTACH ':memory:' AS " + duckIdent(alias)}
	schemas := map[string]bool{}
	names := make([][2]string, 0, len(tables))
	for k := range tables {
		names = append(names, k)
	}
	sortRelations(names)
	for _, k := range names {
		if !schemas[k[0]] {
			schemas[k[0]] = true
			stmts = append(stmts, "CREATE SCHEMA IF NOT EXISTS "+duckIdent(alias)+"."+duckIdent(k[0]))
		}
		stmts = append(stmts, fmt.Sprintf("CREATE OR REPLACE VIEW %s.%s.%s AS SELECT * FROM postgres_scan(%s, %s, %s)",
			duckIdent(alias), duckIdent(k[0]), duckIdent(k[1]), duckLiteral(alias), duckLiteral(k[0]), duckLiteral(k[1])))
	}
	for _, st := range stmts {
		if _, err := conn.ExecContext(ctx, st); err != nil {
			return errors.New(scrub(duckMessage(err.Error()), password))
		}
	}
	return nil
}

// sortRelations orders relation names by schema, then name.
func sortRelations(names [][2]string) {
	slices.SortFunc(names, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
}

// pgCatalogSQL lists the columns of every table, view, materialized view and foreign
// table the connected role can see (information_schema.tables' rule: it owns the
// relation or holds a privilege on it or on a column), outside the system schemas.
// pg_catalog rather than information_schema: it has the type OIDs and modifiers, and
// materialized views.
const pgCatalogSQL = `SELECT n.nspname, c.relname, c.reltuples::float8, a.attname, a.atttypid, a.atttypmod
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\_%'
  AND (pg_catalog.pg_has_role(c.relowner, 'USAGE')
    OR pg_catalog.has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
    OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT, INSERT, UPDATE, REFERENCES'))
ORDER BY n.nspname, c.relname, a.attnum`

// readCatalog reads the relations the connection's role can see.
func (s *pgScanner) readCatalog(ctx context.Context, pc *pgx.Conn) (map[[2]string]*pgRelation, error) {
	rows, err := pc.Query(ctx, pgCatalogSQL)
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]*pgRelation{}
	for rows.Next() {
		var schema, table, col string
		var reltuples float64
		var oid uint32
		var typmod int32
		if err := rows.Scan(&schema, &table, &reltuples, &col, &oid, &typmod); err != nil {
			return nil, fmt.Errorf("read the catalog: %w", err)
		}
		k := [2]string{schema, table}
		rel := out[k]
		if rel == nil {
			rel = &pgRelation{rows: reltuples}
			out[k] = rel
		}
		rel.cols = append(rel.cols, pgColumn{name: col, typ: s.duckType(pc.TypeMap(), oid, typmod)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	return out, nil
}

// duckType maps a Postgres type (OID and modifier) to the DuckDB type it reads as.
func (s *pgScanner) duckType(m *pgtype.Map, oid uint32, typmod int32) pgDuckType {
	prim := func(t duckdb.Type) pgDuckType { return pgDuckType{info: mustType(t)} }
	switch oid {
	case pgtype.BoolOID:
		return prim(duckdb.TYPE_BOOLEAN)
	case pgtype.Int2OID:
		return prim(duckdb.TYPE_SMALLINT)
	case pgtype.Int4OID:
		return prim(duckdb.TYPE_INTEGER)
	case pgtype.Int8OID:
		return prim(duckdb.TYPE_BIGINT)
	case pgtype.Float4OID:
		return prim(duckdb.TYPE_FLOAT)
	case pgtype.Float8OID:
		return prim(duckdb.TYPE_DOUBLE)
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID:
		return prim(duckdb.TYPE_VARCHAR)
	case pgtype.ByteaOID:
		return prim(duckdb.TYPE_BLOB)
	case pgtype.DateOID:
		return prim(duckdb.TYPE_DATE)
	case pgtype.TimestampOID:
		return prim(duckdb.TYPE_TIMESTAMP)
	case pgtype.TimestamptzOID:
		return prim(duckdb.TYPE_TIMESTAMP_TZ)
	case pgtype.TimeOID:
		t := prim(duckdb.TYPE_TIME)
		t.kind = pgTimeOfDay
		return t
	case pgtype.UUIDOID:
		t := prim(duckdb.TYPE_UUID)
		t.kind = pgUUID
		return t
	case pgtype.JSONOID, pgtype.JSONBOID:
		if s.jsonType != nil {
			return pgDuckType{info: s.jsonType, kind: pgJSON}
		}
		return pgDuckType{info: mustType(duckdb.TYPE_VARCHAR), kind: pgText}
	case pgtype.NumericOID:
		// numeric(p,s): typmod is ((p << 16) | s) + 4; unconstrained numeric is DOUBLE,
		// as DuckDB's postgres extension reads it.
		if typmod >= 4 {
			p, sc := (typmod-4)>>16&0xffff, (typmod-4)&0xffff
			if p >= 1 && p <= 38 && sc <= p {
				if info, err := duckdb.NewDecimalInfo(uint8(p), uint8(sc)); err == nil {
					return pgDuckType{info: info, kind: pgDecimal, width: uint8(p), scale: uint8(sc)}
				}
			}
		}
		t := prim(duckdb.TYPE_DOUBLE)
		t.kind = pgDouble
		return t
	}
	if t, ok := m.TypeForOID(oid); ok {
		if ac, ok := t.Codec.(*pgtype.ArrayCodec); ok && ac.ElementType != nil {
			elem := s.duckType(m, ac.ElementType.OID, typmod)
			if !elem.textFormat() && elem.kind != pgList {
				if info, err := duckdb.NewListInfo(elem.info); err == nil {
					return pgDuckType{info: info, kind: pgList, elem: &elem}
				}
			}
		}
	}
	return pgDuckType{info: mustType(duckdb.TYPE_VARCHAR), kind: pgText}
}

// pgSourceFor finds the attached alias a function's first argument names, in the
// statement's command, and returns the arguments as strings.
func pgSourceFor(ctx context.Context, fn string, args []any) (*pgScanner, *pgSource, []string, error) {
	strs := make([]string, len(args))
	for i, a := range args {
		s, ok := a.(string)
		if !ok {
			return nil, nil, nil, fmt.Errorf("%s: argument %d must be a string, got %v", fn, i+1, a)
		}
		strs[i] = s
	}
	s, _ := ctx.Value(pgScannerKey{}).(*pgScanner)
	if s == nil {
		return nil, nil, nil, fmt.Errorf("%s: no Postgres database is attached in this command (tool.auth attaches them)", fn)
	}
	s.mu.Lock()
	src := s.sources[strings.ToLower(strs[0])]
	closed := s.closed
	s.mu.Unlock()
	if src == nil {
		return nil, nil, nil, fmt.Errorf("%s: no attached Postgres database named %q (tool.auth attaches them; the first argument is the alias)", fn, strs[0])
	}
	if closed {
		return nil, nil, nil, fmt.Errorf("%s: the command has ended", fn)
	}
	return s, src, strs, nil
}

// bindPGScan binds postgres_scan(alias, schema, table).
func bindPGScan(ctx context.Context, args []any) (duckdb.RowTableSource, error) {
	s, src, a, err := pgSourceFor(ctx, "postgres_scan", args)
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("postgres_scan(%s.%s.%s)", a[0], a[1], a[2])
	k := [2]string{a[1], a[2]}
	s.mu.Lock()
	rel := src.tables[k]
	s.mu.Unlock()
	if rel == nil {
		// A table the script names that the attach did not see (created since): describe it.
		pc, err := s.acquire(ctx, src)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", label, scrub(err.Error(), src.password))
		}
		cols, err := s.describe(ctx, pc, "SELECT * FROM "+pgx.Identifier{a[1], a[2]}.Sanitize())
		s.releaseOrDiscard(src, pc, err)
		if err != nil {
			return nil, fmt.Errorf("%s: %s", label, scrub(pgMessage(err), src.password))
		}
		rel = &pgRelation{cols: cols}
		s.mu.Lock()
		src.tables[k] = rel
		s.mu.Unlock()
	}
	return &pgScan{ctx: ctx, s: s, src: src, label: label, cols: rel.cols, rows: rel.rows, schema: a[1], table: a[2]}, nil
}

// bindPGQuery binds postgres_query(alias, sql): Postgres describes the query.
func bindPGQuery(ctx context.Context, args []any) (duckdb.RowTableSource, error) {
	s, src, a, err := pgSourceFor(ctx, "postgres_query", args)
	if err != nil {
		return nil, err
	}
	label := fmt.Sprintf("postgres_query(%s)", a[0])
	pc, err := s.acquire(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", label, scrub(err.Error(), src.password))
	}
	cols, err := s.describe(ctx, pc, a[1])
	s.releaseOrDiscard(src, pc, err)
	if err != nil {
		return nil, fmt.Errorf("%s: %s", label, scrub(pgMessage(err), src.password))
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("%s: the statement returns no columns; postgres_query reads rows (write through the postgres tool)", label)
	}
	return &pgScan{ctx: ctx, s: s, src: src, label: label, cols: cols, query: a[1]}, nil
}

// describe asks Postgres for the columns of a query (one statement, nothing run).
func (s *pgScanner) describe(ctx context.Context, pc *pgx.Conn, query string) ([]pgColumn, error) {
	sd, err := pc.PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return nil, err
	}
	cols := make([]pgColumn, len(sd.Fields))
	seen := map[string]int{}
	for i, f := range sd.Fields {
		name := f.Name
		// DuckDB needs distinct column names (SELECT a.id, b.id ...).
		if n := seen[strings.ToLower(name)]; n > 0 {
			for seen[strings.ToLower(fmt.Sprintf("%s_%d", f.Name, n))] > 0 {
				n++
			}
			seen[strings.ToLower(name)] = n + 1
			name = fmt.Sprintf("%s_%d", f.Name, n)
		}
		seen[strings.ToLower(name)]++
		cols[i] = pgColumn{name: name, typ: s.duckType(pc.TypeMap(), f.DataTypeOID, f.TypeModifier)}
	}
	return cols, nil
}

// pgMessage is a Postgres error on one line.
func pgMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		if pgErr.Hint != "" {
			msg += "; hint: " + pgErr.Hint
		}
		return msg
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// scrubErr is err with the password taken out of its message.
func scrubErr(err error, password string) error {
	return errors.New(scrub(pgMessage(err), password))
}

// acquire returns an idle connection of src or opens one.
func (s *pgScanner) acquire(ctx context.Context, src *pgSource) (*pgx.Conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the command has ended")
	}
	if n := len(src.idle); n > 0 {
		pc := src.idle[n-1]
		src.idle = src.idle[:n-1]
		s.mu.Unlock()
		return pc, nil
	}
	s.mu.Unlock()
	pc, err := pgx.ConnectConfig(ctx, src.config.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect: %s", scrub(pgMessage(err), src.password))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closePG(pc)
		return nil, errors.New("the command has ended")
	}
	src.open[pc] = struct{}{}
	s.mu.Unlock()
	return pc, nil
}

// release returns a connection to src's idle list, or closes it if it is not ready for
// another statement.
func (s *pgScanner) release(src *pgSource, pc *pgx.Conn) {
	if pc.IsClosed() || pc.PgConn().IsBusy() || pc.PgConn().TxStatus() != 'I' {
		s.discard(src, pc)
		return
	}
	s.mu.Lock()
	if !s.closed {
		src.idle = append(src.idle, pc)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.discard(src, pc)
}

// releaseOrDiscard releases pc after a statement, closing it if the statement failed
// for want of a working connection.
func (s *pgScanner) releaseOrDiscard(src *pgSource, pc *pgx.Conn, err error) {
	var pgErr *pgconn.PgError
	if err != nil && !errors.As(err, &pgErr) {
		s.discard(src, pc)
		return
	}
	s.release(src, pc)
}

// discard closes a connection of src.
func (s *pgScanner) discard(src *pgSource, pc *pgx.Conn) {
	s.mu.Lock()
	delete(src.open, pc)
	s.mu.Unlock()
	closePG(pc)
}

// closePG closes a connection without waiting long on a server that does not answer.
func closePG(pc *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = pc.Close(ctx)
}

// close closes every connection; scans still bound fail from now on.
func (s *pgScanner) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	var all []*pgx.Conn
	for _, src := range s.sources {
		for pc := range src.open {
			all = append(all, pc)
		}
		src.open, src.idle = map[*pgx.Conn]struct{}{}, nil
	}
	s.mu.Unlock()
	for _, pc := range all {
		closePG(pc)
	}
}

// pgScan is one bound postgres_scan or postgres_query: its rows stream from one
// connection, opened at the first row DuckDB asks for (when the projection is known).
type pgScan struct {
	ctx   context.Context // the DuckDB statement's
	s     *pgScanner
	src   *pgSource
	label string
	cols  []pgColumn
	rows  float64
	// schema and table name a postgres_scan; query a postgres_query.
	schema, table, query string

	mu      sync.Mutex
	started bool
	done    bool
	pc      *pgx.Conn
	rr      *pgconn.ResultReader
	// fields are the result's columns: the table's column index of each.
	fields []int
}

// ColumnInfos implements duckdb.RowTableSource.
func (p *pgScan) ColumnInfos() []duckdb.ColumnInfo {
	out := make([]duckdb.ColumnInfo, len(p.cols))
	for i, c := range p.cols {
		out[i] = duckdb.ColumnInfo{Name: c.name, T: c.typ.info}
	}
	return out
}

// Cardinality implements duckdb.RowTableSource: Postgres's estimate, for join order.
func (p *pgScan) Cardinality() *duckdb.CardinalityInfo {
	if p.rows <= 0 {
		return nil
	}
	return &duckdb.CardinalityInfo{Cardinality: uint(p.rows)}
}

// Init implements duckdb.RowTableSource.
func (p *pgScan) Init() {}

// FillRow implements duckdb.RowTableSource: one row of the Postgres result.
func (p *pgScan) FillRow(row duckdb.Row) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return false, nil
	}
	if !p.started {
		p.started = true
		if err := p.start(row); err != nil {
			p.done = true
			return false, p.fail(err)
		}
	}
	if !p.rr.NextRow() {
		p.done = true
		_, err := p.rr.Close()
		p.rr = nil
		pc := p.pc
		p.pc = nil
		if _, rerr := pc.PgConn().Exec(p.ctx, "ROLLBACK").ReadAll(); rerr != nil && err == nil {
			err = rerr
		}
		p.s.releaseOrDiscard(p.src, pc, err)
		if err != nil {
			return false, p.fail(err)
		}
		return false, nil
	}
	vals := p.rr.Values()
	fds := p.rr.FieldDescriptions()
	m := p.pc.TypeMap()
	for j, ci := range p.fields {
		v, err := p.value(m, ci, fds[j], vals[j])
		if err == nil {
			err = row.SetRowValue(ci, v)
		}
		if err != nil {
			p.done = true
			p.abandonLocked()
			return false, fmt.Errorf("%s: column %q: %s", p.label, p.cols[ci].name, scrub(err.Error(), p.src.password))
		}
	}
	return true, nil
}

// start opens the connection and sends the statement: a postgres_scan selects only the
// projected columns.
func (p *pgScan) start(row duckdb.Row) error {
	query := p.query
	p.fields = p.fields[:0]
	if query == "" {
		var sel []string
		for i, c := range p.cols {
			if row.IsProjected(i) {
				p.fields = append(p.fields, i)
				sel = append(sel, pgx.Identifier{c.name}.Sanitize())
			}
		}
		list := "NULL" // no column used (count(*)): one throwaway per row
		if len(sel) > 0 {
			list = strings.Join(sel, ", ")
		}
		query = "SELECT " + list + " FROM " + pgx.Identifier{p.schema, p.table}.Sanitize()
	} else {
		for i := range p.cols {
			p.fields = append(p.fields, i)
		}
	}
	pc, err := p.s.acquire(p.ctx, p.src)
	if err != nil {
		return err
	}
	p.pc = pc
	// A scan the statement leaves unfinished gives its connection up when the
	// statement ends.
	context.AfterFunc(p.ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.abandonLocked()
	})
	formats := make([]int16, len(p.fields))
	for j, ci := range p.fields {
		if !p.cols[ci].typ.textFormat() {
			formats[j] = pgx.BinaryFormatCode
		}
	}
	if len(p.fields) == 0 {
		formats = nil
	}
	if _, err := pc.PgConn().Exec(p.ctx, "BEGIN READ ONLY").ReadAll(); err != nil {
		return err
	}
	p.rr = pc.PgConn().ExecParams(p.ctx, query, nil, nil, nil, formats)
	// (No field descriptions: the statement failed; NextRow and Close report it.)
	if got := len(p.rr.FieldDescriptions()); len(p.fields) > 0 && got > 0 && got != len(p.fields) {
		return fmt.Errorf("the query returns %d columns, %d when bound (the relation changed)", got, len(p.fields))
	}
	return nil
}

// fail ends the scan after err, its connection closed, and names the scan.
func (p *pgScan) fail(err error) error {
	p.abandonLocked()
	msg := pgMessage(err)
	if p.ctx.Err() != nil {
		msg += " (" + context.Cause(p.ctx).Error() + ")"
	}
	return fmt.Errorf("%s: %s", p.label, scrub(msg, p.src.password))
}

// abandonLocked closes the scan's connection if it still holds one (its result
// unfinished). p.mu is held.
func (p *pgScan) abandonLocked() {
	p.done = true
	p.rr = nil
	if p.pc != nil {
		pc := p.pc
		p.pc = nil
		p.s.discard(p.src, pc)
	}
}

// value decodes one field of a row as the column's DuckDB value.
func (p *pgScan) value(m *pgtype.Map, ci int, fd pgconn.FieldDescription, raw []byte) (any, error) {
	if raw == nil {
		return nil, nil
	}
	t := p.cols[ci].typ
	switch t.kind {
	case pgText:
		return string(raw), nil
	case pgJSON:
		return json.RawMessage(raw), nil
	}
	if t.kind == pgList && fd.Format == pgx.BinaryFormatCode && len(raw) >= 4 {
		// pgx would flatten a multi-dimensional array; the type does not say its
		// dimensions, so the value does.
		if dims := int32(binary.BigEndian.Uint32(raw)); dims > 1 {
			return nil, fmt.Errorf("a %d-dimensional array does not fit a list column; read it with postgres_query as text (::text) or JSON (array_to_json)", dims)
		}
	}
	typ, ok := m.TypeForOID(fd.DataTypeOID)
	if !ok {
		return nil, fmt.Errorf("Postgres type %d is not the type the column had when bound", fd.DataTypeOID)
	}
	v, err := typ.Codec.DecodeValue(m, fd.DataTypeOID, fd.Format, raw)
	if err != nil {
		return nil, err
	}
	return duckFromPG(t, v)
}

// duckFromPG converts a decoded Postgres value to what DuckDB's column of type t takes.
func duckFromPG(t pgDuckType, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch t.kind {
	case pgDecimal:
		n, ok := v.(pgtype.Numeric)
		if !ok || !n.Valid {
			return nil, fmt.Errorf("%T is not a numeric", v)
		}
		if n.NaN || n.InfinityModifier != pgtype.Finite {
			return nil, fmt.Errorf("numeric NaN or infinity does not fit DECIMAL(%d,%d)", t.width, t.scale)
		}
		u := new(big.Int).Set(n.Int)
		if e := int64(n.Exp) + int64(t.scale); e >= 0 {
			u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(e), nil))
		} else {
			u.Quo(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-e), nil))
		}
		if t.width <= 18 {
			return u.Int64(), nil
		}
		return u, nil
	case pgDouble:
		n, ok := v.(pgtype.Numeric)
		if !ok {
			return nil, fmt.Errorf("%T is not a numeric", v)
		}
		f, err := n.Float64Value()
		if err != nil {
			return nil, err
		}
		return f.Float64, nil
	case pgTimeOfDay:
		tm, ok := v.(pgtype.Time)
		if !ok {
			return nil, fmt.Errorf("%T is not a time", v)
		}
		return time.Unix(0, 0).UTC().Add(time.Duration(tm.Microseconds) * time.Microsecond), nil
	case pgUUID:
		b, ok := v.([16]byte)
		if !ok {
			return nil, fmt.Errorf("%T is not a uuid", v)
		}
		return duckdb.UUID(b), nil
	case pgList:
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%T is not a one-dimensional array", v)
		}
		out := make([]any, len(l))
		for i, e := range l {
			c, err := duckFromPG(*t.elem, e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i+1, err)
			}
			out[i] = c
		}
		return out, nil
	}
	switch x := v.(type) {
	case pgtype.InfinityModifier:
		return nil, fmt.Errorf("%s does not fit the DuckDB column", x)
	}
	return v, nil
}
