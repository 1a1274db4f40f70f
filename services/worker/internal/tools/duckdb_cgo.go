//go:build cgo

package tools

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"
)

// Run implements Tool.
func (d *DuckDB) Run(ctx context.Context, c *Call) (any, error) {
	req, err := parseDuckRequest(c.Config)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "noetl-duckdb-")
	if err != nil {
		return nil, &Error{Msg: "duckdb: scratch directory: " + err.Error(), Retryable: true}
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := req.database
	if path != "" && !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	connector, err := duckdb.NewConnector(path, func(execer driver.ExecerContext) error {
		// Spills go to the scratch directory; extensions load only from the extension
		// directory, never downloaded behind the worker's egress policy.
		_, err := execer.ExecContext(ctx, "SET temp_directory = "+duckLiteral(dir)+"; SET autoinstall_known_extensions = false", nil)
		return err
	})
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("duckdb: open database %q: %s", req.database, duckMessage(err.Error())), Retryable: ctx.Err() != nil}
	}
	db := sql.OpenDB(connector)
	defer func() { _ = db.Close() }() // closes the connector too
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, &Error{Msg: fmt.Sprintf("duckdb: open database %q: %s", req.database, duckMessage(err.Error())), Retryable: ctx.Err() != nil}
	}
	defer func() { _ = conn.Close() }()
	for _, set := range req.settings {
		if _, err := conn.ExecContext(ctx, set); err != nil {
			return nil, &Error{Msg: "duckdb: " + strings.ToLower(strings.Fields(set)[1]) + ": " + duckMessage(err.Error()), Retryable: ctx.Err() != nil}
		}
	}
	scanner, secrets, err := d.attach(ctx, conn, req)
	// The scanner's connections close after the script, before the database.
	defer scanner.close()
	if err != nil {
		return nil, err
	}
	if scanner != nil {
		ctx = context.WithValue(ctx, pgScannerKey{}, scanner)
	}
	return runDuckScript(ctx, conn, req, secrets)
}

// attach resolves and attaches the request's postgres credentials, returning the secret
// values to keep out of later messages. DuckDB's postgres extension attaches them when
// it loads (from the extension directory, never downloaded); else the worker's own
// scanner does (duckdb_pgscan.go), returned to be closed when the command ends.
func (d *DuckDB) attach(ctx context.Context, conn *sql.Conn, req *duckRequest) (*pgScanner, []string, error) {
	var secrets []string
	var scanner *pgScanner
	tried, extension := false, false
	for _, a := range req.attach {
		ra, err := resolveAuth(ctx, d.Resolve, "duckdb", a.auth)
		if err != nil {
			return scanner, nil, err
		}
		if ra == nil {
			continue
		}
		label := "auth"
		if ra.name != "" {
			label = fmt.Sprintf("auth %q", ra.name)
		}
		if t := strings.ToLower(ra.typ); t != "" && t != "postgres" && t != "postgresql" {
			return scanner, nil, &Error{Msg: fmt.Sprintf("duckdb: %s is a %q credential; only postgres credentials can be attached", label, ra.typ)}
		}
		dsn := pgCredentialDSN(ra.data, nil)
		if dsn == "" {
			return scanner, nil, &Error{Msg: fmt.Sprintf("duckdb: %s holds no connection (connection_string, or host/database/user)", label)}
		}
		password := passwordOf(dsn)
		secrets = append(secrets, password)
		failed := func(what string, err error) error {
			return &Error{Msg: fmt.Sprintf("duckdb: %s: %s as %s: %s", label, what, duckIdent(a.alias), scrub(duckMessage(err.Error()), password)), Retryable: ctx.Err() != nil}
		}
		if !tried {
			_, err := conn.ExecContext(ctx, "LOAD postgres_scanner")
			tried, extension = true, err == nil
		}
		if extension {
			if _, err := conn.ExecContext(ctx, duckAttachSQL(dsn, a.alias)); err != nil {
				return scanner, nil, failed("attach", err)
			}
			continue
		}
		cfg, err := pgConnConfig(dsn)
		if err != nil {
			return scanner, nil, &Error{Msg: fmt.Sprintf("duckdb: %s: bad connection parameters: %s", label, scrub(err.Error(), password))}
		}
		if scanner == nil {
			if scanner, err = newPGScanner(ctx, conn); err != nil {
				return nil, nil, &Error{Msg: fmt.Sprintf("duckdb: %s: the worker's Postgres scanner: %s", label, duckMessage(err.Error()))}
			}
		}
		actx, cancel := duckStatementContext(context.WithValue(ctx, pgScannerKey{}, scanner), req.timeout)
		err = scanner.attach(actx, conn, a.alias, label, cfg.ConnConfig, password)
		timedOut := errors.Is(context.Cause(actx), errStatementTimeout) && ctx.Err() == nil
		cancel()
		if timedOut {
			return scanner, nil, &Error{Msg: fmt.Sprintf("duckdb: %s: attach as %s: cancelled at the statement timeout (tool.statement_timeout_ms)", label, duckIdent(a.alias))}
		}
		if err != nil {
			return scanner, nil, failed("attach", err)
		}
	}
	return scanner, secrets, nil
}

// runDuckScript runs the statements in order, each under the statement timeout, and
// returns the last one's rows; params bind to the last statement.
func runDuckScript(ctx context.Context, conn *sql.Conn, req *duckRequest, secrets []string) (map[string]any, error) {
	n := len(req.statements)
	if req.oneStatement {
		// Only the count matters here: any other error (one statement that does not
		// bind, which context-free Prepare does without the statement's context, so
		// without the command's Postgres scanner) is the statement's own to report
		// when it runs.
		if err := duckOneStatement(conn, req.statements[0]); err != nil && strings.Contains(err.Error(), "multi-statement query") {
			return nil, &Error{Msg: "duckdb: the SQL text holds several statements; " + severalStatementsHint}
		}
	}
	for i, stmt := range req.statements[:n-1] {
		sctx, cancel := duckStatementContext(ctx, req.timeout)
		_, err := conn.ExecContext(sctx, stmt)
		cancel()
		if err != nil {
			return nil, duckFailure(ctx, sctx, err, duckStatementLabel(i, n, stmt), secrets)
		}
	}
	last := req.statements[n-1]
	sctx, cancel := duckStatementContext(ctx, req.timeout)
	defer cancel()
	cols, rows, err := duckQuery(sctx, conn, last, req)
	if err != nil {
		return nil, duckFailure(ctx, sctx, err, duckStatementLabel(n-1, n, last), secrets)
	}
	colList := make([]any, len(cols))
	for i, c := range cols {
		colList[i] = c
	}
	return map[string]any{
		"rows": rows, "columns": colList, "row_count": int64(len(rows)),
		"command": duckCommand(last), "statements": n,
	}, nil
}

// duckOneStatement checks with DuckDB's own parser that text holds exactly one
// statement, running nothing: the driver's context-free Prepare refuses several.
func duckOneStatement(conn *sql.Conn, text string) error {
	return conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		st, err := c.Prepare(text)
		if err != nil {
			return err
		}
		return st.Close()
	})
}

// duckStatementContext bounds one statement by the timeout (none when zero).
func duckStatementContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, timeout, errStatementTimeout)
}

// duckQuery runs one statement and reads at most req.maxRows of its rows.
func duckQuery(ctx context.Context, conn *sql.Conn, stmt string, req *duckRequest) ([]string, []any, error) {
	rs, err := conn.QueryContext(ctx, stmt, req.params...)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = rs.Close() }()
	cols, err := rs.Columns()
	if err != nil {
		return nil, nil, err
	}
	types, err := rs.ColumnTypes()
	if err != nil {
		return nil, nil, err
	}
	dbTypes := make([]string, len(types))
	for i, t := range types {
		dbTypes[i] = t.DatabaseTypeName()
	}
	rows := []any{}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rs.Next() {
		if len(rows) >= req.maxRows {
			return nil, nil, &errTooManyRows{max: req.maxRows}
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, nil, err
		}
		if req.asObjects {
			row := make(map[string]any, len(cols))
			for i, c := range cols {
				row[c] = duckValue(vals[i], dbTypes[i])
			}
			rows = append(rows, row)
		} else {
			row := make([]any, len(cols))
			for i := range cols {
				row[i] = duckValue(vals[i], dbTypes[i])
			}
			rows = append(rows, row)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, nil, err
	}
	return cols, rows, nil
}

// duckValue converts a value the driver scanned into a JSON-friendly one; dbType is the
// column's DuckDB type name (it tells a DATE from a TIMESTAMP, a UUID from a BLOB).
func duckValue(v any, dbType string) any {
	switch x := v.(type) {
	case nil, bool, string, int64:
		return x
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case int:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return strconv.FormatUint(x, 10)
	case float32:
		return floatValue(float64(x))
	case float64:
		return floatValue(x)
	case *big.Int:
		if x.IsInt64() {
			return x.Int64()
		}
		return x.String()
	case duckdb.Decimal:
		if x.Value == nil {
			return nil
		}
		return numericValue(x.String())
	case duckdb.Interval:
		return map[string]any{"months": int64(x.Months), "days": int64(x.Days), "micros": x.Micros}
	case duckdb.UUID:
		return x.String()
	case []byte:
		if dbType == "UUID" && len(x) == 16 {
			var u duckdb.UUID
			copy(u[:], x)
			return u.String()
		}
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		switch dbType {
		case "DATE":
			return x.Format("2006-01-02")
		case "TIME", "TIME_NS":
			return x.Format("15:04:05.999999999")
		case "TIMETZ":
			return x.Format("15:04:05.999999999Z07:00")
		}
		return x.UTC().Format(time.RFC3339Nano)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = duckValue(e, "")
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = duckValue(e, "")
		}
		return out
	case duckdb.OrderedMap:
		out := make(map[string]any, x.Len())
		keys, values := x.Keys(), x.Values()
		for i := range keys {
			out[duckMapKey(keys[i])] = duckValue(values[i], "")
		}
		return out
	case duckdb.Map:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[duckMapKey(k)] = duckValue(e, "")
		}
		return out
	case duckdb.Union:
		return duckValue(x.Value, "")
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// duckMapKey spells a MAP key as a JSON object key.
func duckMapKey(k any) string {
	switch v := duckValue(k, "").(type) {
	case string:
		return v
	case nil:
		return "null"
	default:
		return fmt.Sprint(v)
	}
}

// assert at compile time that the cgo build's tool is a Tool.
var _ Tool = (*DuckDB)(nil)
