package tools

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/noetl/noetl/internal/playbook"
)

// Defaults of the duckdb tool.
const (
	// DefaultDuckDBStatementTimeout bounds each statement unless the tool sets
	// statement_timeout_ms.
	DefaultDuckDBStatementTimeout = 60 * time.Second
	// DefaultDuckDBMaxRows caps the rows a result may hold unless the tool sets max_rows.
	DefaultDuckDBMaxRows = 10000
)

// DuckDB is the duckdb tool (kind duckdb): it runs a SQL script in an embedded DuckDB
// database opened for the command and closed after it. The statements run in order on
// one connection; the result is the last statement's rows, in the postgres tool's shape:
//
//	{"rows": [{col: val}...] or [[val...]...], "columns": [...], "row_count": n,
//	 "command": "<first keyword of the last statement>", "statements": k}
//
// so a large result is stored as Arrow like any other table (internal/tabular).
//
// Config keys: command (alias query; a script of one or more statements separated by
// ";" when the text is the playbook's own literal SQL or multi_statement is true, else
// exactly one statement, as for postgres), multi_statement (default false), params (a positional list bound to the last statement's ? or $1..$n),
// database (alias db_path): absent, empty or ":memory:" is an in-memory database; an
// absolute path is that file, kept after the command; a relative path is a file in the
// command's own scratch directory, removed with it (DuckDB's temp_directory, where large
// operations spill, is that directory too); as_objects (default true: rows are objects
// keyed by column; false: lists in column order); statement_timeout_ms (default 60000,
// for each statement; 0 means none); max_rows (default 10000; a larger result fails);
// memory_limit (DuckDB's, e.g. "1GB": past it operators spill to the scratch directory or
// fail; default DuckDB's own, 80% of the machine's memory), threads (default one per
// core); auth: a stored postgres credential attached before the script runs, so the script
// reads its tables as <alias>.<schema>.<table>. auth is a credential name (attached
// under that name, or attach_as), or NoETL's map of aliases
// ({alias: {source: credential, key: <name>}, ...}), each attached under its alias.
// DuckDB's postgres extension (postgres_scanner) attaches them when it loads from the
// extension directory (never downloaded: full pushdown and writes); else the worker's
// own read-only scanner does (duckdb_pgscan.go): a view per table and view the
// credential sees, over postgres_scan('<alias>', '<schema>', '<table>'), and
// postgres_query('<alias>', '<sql>'), which pushes a whole query down.
//
// Values come back JSON-friendly: integers as int64 (128-bit and unsigned ones past
// int64 as decimal text), floats as float64 (NaN and infinities as text), decimals as
// float64 when they round-trip (else exact text), timestamps as RFC 3339 strings in UTC,
// dates as YYYY-MM-DD, times as HH:MM:SS[.ffffff], uuids as text, blobs as base64,
// intervals as {months, days, micros}, lists, structs and maps as JSON lists and
// objects, JSON values decoded.
//
// Credential values never appear in errors or results. A worker built without cgo has
// no DuckDB: its tool fails every call with ErrDuckDBNeedsCgo.
type DuckDB struct {
	// Resolve fetches credentials named by auth; nil means auth cannot be used.
	Resolve CredentialResolver
}

// ErrDuckDBNeedsCgo is the failure of the duckdb tool in a worker built without cgo
// (DuckDB is a C++ library linked through cgo).
var ErrDuckDBNeedsCgo = errors.New("duckdb needs a worker built with cgo (CGO_ENABLED=1); this worker was built without it")

// errStatementTimeout is the cause of a statement's context past statement_timeout_ms.
var errStatementTimeout = errors.New("statement timeout")

// duckRequest is a parsed duckdb tool config.
type duckRequest struct {
	statements []string
	params     []any
	database   string // "" is in-memory; else a path, absolute or relative to the scratch dir
	asObjects  bool
	timeout    time.Duration
	maxRows    int
	attach     []duckAttach
	// settings are DuckDB settings the tool sets before the script (memory_limit, threads).
	settings []string
	// oneStatement makes the SQL run as exactly one statement, which DuckDB's parser
	// checks before anything runs: the SQL is not the playbook's own literal text and
	// the tool does not set multi_statement: true.
	oneStatement bool
}

// duckAttach is one credential to attach: the alias the script names it by and the
// credential (a name, or inline data when name is empty).
type duckAttach struct {
	alias string
	auth  any
}

func parseDuckRequest(cfg map[string]any) (*duckRequest, error) {
	fail := func(format string, a ...any) (*duckRequest, error) {
		return nil, &Error{Msg: "duckdb: " + fmt.Sprintf(format, a...)}
	}
	sql, _ := cfg["command"].(string)
	if strings.TrimSpace(sql) == "" {
		sql, _ = cfg["query"].(string)
	}
	if strings.TrimSpace(sql) == "" {
		return fail("tool.command (or tool.query) is required")
	}
	r := &duckRequest{statements: splitStatements(sql), asObjects: true, timeout: DefaultDuckDBStatementTimeout, maxRows: DefaultDuckDBMaxRows}
	if len(r.statements) == 0 {
		return fail("tool.command holds no SQL statement (only comments or semicolons)")
	}
	// Parse accepts only a literal boolean here; anything else did not come from the
	// playbook's author.
	multi, isBool := cfg["multi_statement"].(bool)
	if v := cfg["multi_statement"]; v != nil && !isBool {
		return fail("tool.multi_statement must be true or false, got %v", v)
	}
	if !multi && !literalSQL(cfg[playbook.SQLLiteralDigestsKey], sql) {
		r.oneStatement = true
		r.statements = []string{strings.TrimSpace(sql)}
	}
	switch ps := cfg["params"].(type) {
	case nil:
	case []any:
		r.params = make([]any, len(ps))
		for i, v := range ps {
			r.params[i] = pgParam(v)
		}
	case map[string]any:
		return fail("tool.params must be a positional list (? or $1, $2, ...), got a map")
	default:
		r.params = []any{pgParam(ps)}
	}
	db := strings.TrimSpace(cfgString(cfg, "database", "db_path"))
	switch {
	case db == "" || db == ":memory:":
	case filepath.IsAbs(db):
		r.database = db
	case filepath.IsLocal(db):
		r.database = db
	default:
		return fail("tool.database %q is a relative path that leaves the command's scratch directory; give an absolute path or a plain file name", db)
	}
	var err error
	if r.asObjects, err = cfgBool(cfg["as_objects"], true); err != nil {
		return fail("tool.as_objects: %v", err)
	}
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
	if v := strings.TrimSpace(cfgString(cfg, "memory_limit")); v != "" {
		r.settings = append(r.settings, "SET memory_limit = "+duckLiteral(v))
	}
	if v, ok := cfg["threads"]; ok && v != nil {
		f, ok := cfgNumber(v)
		if !ok || f < 1 || f > 1024 || f != math.Trunc(f) {
			return fail("tool.threads must be a positive integer, got %v", v)
		}
		r.settings = append(r.settings, fmt.Sprintf("SET threads = %d", int(f)))
	}
	if r.attach, err = duckAttachments(cfg); err != nil {
		return nil, err
	}
	return r, nil
}

// duckAttachments reads tool.auth (and tool.attach_as) into the credentials to attach.
func duckAttachments(cfg map[string]any) ([]duckAttach, error) {
	as := strings.TrimSpace(cfgString(cfg, "attach_as"))
	auth := cfg["auth"]
	if m, ok := auth.(map[string]any); ok && len(m) > 0 {
		// NoETL's unified form: every entry an alias naming a credential.
		aliases := true
		for _, v := range m {
			e, ok := v.(map[string]any)
			if !ok {
				aliases = false
				break
			}
			if name, _ := authName(e); name == "" {
				aliases = false
				break
			}
		}
		if aliases {
			if as != "" {
				return nil, &Error{Msg: "duckdb: tool.attach_as cannot be used with a map of aliases in tool.auth (each key is the alias)"}
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			out := make([]duckAttach, 0, len(keys))
			for _, k := range keys {
				name, _ := authName(m[k].(map[string]any))
				out = append(out, duckAttach{alias: k, auth: name})
			}
			return out, nil
		}
	}
	name, inline := authName(auth)
	switch {
	case name == "" && inline == nil:
		if as != "" {
			return nil, &Error{Msg: "duckdb: tool.attach_as is set but tool.auth names no credential"}
		}
		return nil, nil
	case as != "":
	case name != "":
		as = name
	default:
		as = "pg"
	}
	return []duckAttach{{alias: as, auth: auth}}, nil
}

// duckAttachSQL is the ATTACH statement for a Postgres connection string under alias.
func duckAttachSQL(dsn, alias string) string {
	return "ATTACH " + duckLiteral(dsn) + " AS " + duckIdent(alias) + " (TYPE postgres)"
}

// duckLiteral quotes s as a SQL string literal.
func duckLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// duckIdent quotes s as a SQL identifier.
func duckIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// duckCommand is the first keyword of a statement (SELECT, INSERT, ...), for the result's
// "command"; WITH ... SELECT reads as WITH.
func duckCommand(stmt string) string {
	s := strings.TrimLeftFunc(skipLeadingComments(stmt), func(r rune) bool { return unicode.IsSpace(r) || r == '(' })
	end := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsLetter(r) })
	if end < 0 {
		end = len(s)
	}
	return strings.ToUpper(s[:end])
}

// duckStatementLabel names a statement of the script in an error: its position and the
// start of its text on one line.
func duckStatementLabel(i, n int, stmt string) string {
	text := strings.Join(strings.Fields(skipLeadingComments(stmt)), " ")
	if r := []rune(text); len(r) > 80 {
		text = string(r[:77]) + "..."
	}
	return fmt.Sprintf("statement %d of %d (%s)", i+1, n, text)
}

var duckCaretRE = regexp.MustCompile(`^\s*\^\s*$`)

// duckMessage flattens a DuckDB error message onto one line, leaving out the echo of the
// statement's text (LINE n: ... and the caret under it), which the caller names already.
func duckMessage(msg string) string {
	var keep []string
	for _, l := range strings.Split(msg, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "LINE ") || duckCaretRE.MatchString(l) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "; ")
}

// duckFailure turns the error of statement i into an *Error naming it, its message
// scrubbed of secrets. A statement past its timeout is not retryable (it would time out
// again); the worker stopping or the execution being cancelled is.
func duckFailure(ctx context.Context, stmtCtx context.Context, err error, label string, secrets []string) error {
	var tooMany *errTooManyRows
	if errors.As(err, &tooMany) {
		return &Error{Msg: "duckdb: " + label + ": " + tooMany.Error()}
	}
	if errors.Is(context.Cause(stmtCtx), errStatementTimeout) && ctx.Err() == nil {
		return &Error{Msg: fmt.Sprintf("duckdb: %s: cancelled at the statement timeout (tool.statement_timeout_ms)", label)}
	}
	msg := duckMessage(err.Error())
	for _, s := range secrets {
		msg = scrub(msg, s)
	}
	if ctx.Err() != nil {
		return &Error{Msg: "duckdb: " + label + ": " + msg + " (" + context.Cause(ctx).Error() + ")", Retryable: true}
	}
	return &Error{Msg: "duckdb: " + label + ": " + msg}
}

// skipLeadingComments drops the white space and comments a statement starts with.
func skipLeadingComments(s string) string {
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			depth, i := 0, 0
			for ; i < len(s); i++ {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i++
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i++
					if depth == 0 {
						break
					}
				}
			}
			if i >= len(s) {
				return ""
			}
			s = s[i+1:]
		default:
			return s
		}
	}
}

// splitStatements splits a SQL script at the semicolons that end its statements, leaving
// alone those inside quoted strings ('...', E'...'), quoted identifiers ("..."),
// dollar-quoted strings ($tag$...$tag$) and comments (-- and nested /* */). Statements
// that hold nothing but white space and comments are dropped.
func splitStatements(sql string) []string {
	var out []string
	start := 0
	code := false // the current statement has something besides space and comments
	emit := func(end int) {
		if code {
			out = append(out, strings.TrimSpace(sql[start:end]))
		}
		start, code = end+1, false
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == ';':
			emit(i)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth := 0
			for ; i < len(sql); i++ {
				if sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*' {
					depth++
					i++
				} else if sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/' {
					depth--
					i++
					if depth == 0 {
						break
					}
				}
			}
		case c == '\'' || c == '"':
			code = true
			backslash := c == '\'' && i > 0 && (sql[i-1] == 'e' || sql[i-1] == 'E') && (i < 2 || !isIdentByte(sql[i-2]))
			for i++; i < len(sql); i++ {
				if backslash && sql[i] == '\\' {
					i++
					continue
				}
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c { // doubled quote
						i++
						continue
					}
					break
				}
			}
		case c == '$' && (i == 0 || !isIdentByte(sql[i-1])):
			code = true
			if tag, ok := dollarTag(sql[i:]); ok {
				if end := strings.Index(sql[i+len(tag):], tag); end >= 0 {
					i += len(tag) + end + len(tag) - 1
				} else {
					i = len(sql)
				}
			}
		case !unicode.IsSpace(rune(c)):
			code = true
		}
	}
	emit(len(sql))
	return out
}

// dollarTag returns the opening $tag$ (or $$) at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1], true
		case s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || j > 1 && s[j] >= '0' && s[j] <= '9':
		default:
			return "", false
		}
	}
	return "", false
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
