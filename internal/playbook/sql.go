package playbook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"go.yaml.in/yaml/v3"
)

// SQLLiteralDigestsKey is the tool configuration key under which Parse records the
// SHA-256 digests (hex) of the SQL fields of a tool that hold no template: the SQL text
// the author wrote as it stands. The postgres tool runs several statements only when the
// SQL it is about to run has one of these digests (or the tool sets multi_statement:
// true); any other SQL text runs as exactly one statement. Parse sets the key on the
// tools that carry SQL (kinds postgres and duckdb, and workbook calls that set a SQL
// field) and removes it from every other tool, so an author's own value never survives.
const SQLLiteralDigestsKey = "_sql_literal_sha256"

// SQLTextDigest returns the digest of sql that Parse records under SQLLiteralDigestsKey.
func SQLTextDigest(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return hex.EncodeToString(sum[:])
}

// sqlFields are the keys of a tool mapping that hold SQL text, in the order the postgres
// tool reads them.
var sqlFields = []string{"command", "query"}

// sqlKinds are the tool kinds whose SQL fields Parse checks.
var sqlKinds = map[string]bool{"postgres": true, "duckdb": true, "workbook": true}

// maxListedSQLTemplates bounds the templates one warning names.
const maxListedSQLTemplates = 3

// sqlTool is Parse's SQL check of one tool mapping n: for a tool that carries SQL text it
// records the digests of its template-free SQL fields under SQLLiteralDigestsKey, warns
// once per SQL field about the templates spliced into the text without sql_literal or
// sql_ident, and requires multi_statement to be a literal boolean (dropping any other
// value, so that a workbook task, kept despite errors, never honours one).
func (b *builder) sqlTool(n *yaml.Node, t *Tool, step, field string) {
	delete(t.Config, SQLLiteralDigestsKey)
	if !sqlKinds[t.Kind] {
		return
	}
	var digests []any
	for _, key := range sqlFields {
		src, ok := t.Config[key].(string)
		if !ok {
			continue
		}
		if !isTemplate(src) {
			digests = append(digests, SQLTextDigest(src))
			continue
		}
		c := compileTemplate(src)
		if c.err != nil {
			continue // refs warns that the template does not compile
		}
		var spliced []sqlSplice
		unsafeSQLOutputs(src, c.root.Nodes, &spliced)
		if len(spliced) == 0 {
			continue
		}
		line := n.Line
		if vn := value(n, key); vn != nil {
			line = vn.Line
			if vn.Style&yaml.LiteralStyle != 0 {
				line += spliced[0].line // the text starts on the line after the indicator
			}
		}
		b.warnings = append(b.warnings, Warning{Line: line, Step: step, Msg: sqlWarning(field+"."+key, spliced)})
	}
	if len(digests) > 0 {
		t.Config[SQLLiteralDigestsKey] = digests
	}
	if v, ok := t.Config["multi_statement"]; ok && v != nil {
		if _, isBool := v.(bool); !isBool {
			b.errorf(value(n, "multi_statement"), step, field+".multi_statement", "must be a literal true or false, not %s", describeValue(v))
			// A workbook task is kept despite the error (as a warning): never honour the value.
			delete(t.Config, "multi_statement")
		}
	}
}

// describeValue names a configuration value for an error.
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		if isTemplate(x) {
			return "a template"
		}
		return fmt.Sprintf("the string %q", shorten(x))
	case int64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return typeName(v)
}

// sqlSplice is one template output spliced into SQL text unquoted.
type sqlSplice struct {
	text string // the template's source, such as {{ workload.t }}
	line int    // its 1-based line inside the SQL text
}

// sqlWarning formats the warning about the splices of one SQL field.
func sqlWarning(field string, spliced []sqlSplice) string {
	var texts []string
	for _, s := range spliced {
		if !slices.Contains(texts, s.text) {
			texts = append(texts, s.text)
		}
	}
	if len(texts) == 1 {
		return fmt.Sprintf("template %s is spliced into SQL text (%s); pass it through sql_literal or sql_ident, or bind it with params", texts[0], field)
	}
	list := strings.Join(texts[:min(len(texts), maxListedSQLTemplates)], ", ")
	if more := len(texts) - maxListedSQLTemplates; more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("templates %s are spliced into SQL text (%s); pass them through sql_literal or sql_ident, or bind them with params", list, field)
}

// unsafeSQLOutputs appends the outputs among ns (and inside the bodies of if and for
// tags) whose value is not quoted for SQL.
func unsafeSQLOutputs(src string, ns []nodes.Node, out *[]sqlSplice) {
	for _, n := range ns {
		switch x := n.(type) {
		case *nodes.Output:
			if !safeSQLOutput(x) {
				*out = append(*out, sqlSplice{text: outputSource(src, x), line: max(x.Start.Line, 1)})
			}
		case *nodes.ControlStructureBlock:
			switch cs := x.ControlStructure.(type) {
			case *controlStructures.IfControlStructure:
				for _, w := range cs.Wrappers {
					unsafeSQLOutputs(src, w.Nodes, out)
				}
			case *controlStructures.ForControlStructure:
				unsafeSQLOutputs(src, cs.BodyWrapper.Nodes, out)
				if cs.EmptyWrapper != nil {
					unsafeSQLOutputs(src, cs.EmptyWrapper.Nodes, out)
				}
			}
			// A {% set %} writes nothing: the variable is checked where it is output.
		}
	}
}

// outputSource returns the source text of an output, {{ ... }} included.
func outputSource(src string, o *nodes.Output) string {
	if o.Start != nil && o.End != nil {
		from, to := o.Start.Pos, o.End.Pos+len(o.End.Val)
		if from >= 0 && from < to && to <= len(src) {
			return strings.Join(strings.Fields(src[from:to]), " ")
		}
	}
	return "{{ " + o.Expression.String() + " }}"
}

// safeSQLOutput reports whether an output writes SQL that cannot change the statement's
// structure: a quoted value, a number, or a constant of the template.
func safeSQLOutput(o *nodes.Output) bool {
	if !safeSQLExpr(o.Expression) {
		return false
	}
	return o.Alternative == nil || safeSQLExpr(o.Alternative)
}

func safeSQLExpr(e nodes.Expression) bool {
	switch x := e.(type) {
	case *nodes.String, *nodes.Integer, *nodes.Float, *nodes.Bool, *nodes.None:
		return true
	case *nodes.BinaryExpression:
		return x.Operator != nil && x.Operator.Token != nil && x.Operator.Token.Val == "~" &&
			safeSQLExpr(x.Left) && safeSQLExpr(x.Right)
	case *nodes.FilteredExpression:
		if len(x.Filters) == 0 {
			return safeSQLExpr(x.Expression)
		}
		last := x.Filters[len(x.Filters)-1]
		switch last.Name {
		case "sql_literal", "sql_ident":
			return true
		case "int", "float", "length", "count":
			// Numbers, unless a default taken from the scope can replace them.
			return constantArgs(last)
		case "join":
			// {{ xs | map('sql_literal') | join(', ') }}: quoted items, a constant separator.
			if len(x.Filters) < 2 || !constantArgs(last) {
				return false
			}
			m := x.Filters[len(x.Filters)-2]
			if m.Name != "map" || len(m.Args) != 1 || len(m.Kwargs) != 0 {
				return false
			}
			s, ok := m.Args[0].(*nodes.String)
			return ok && (s.Val == "sql_literal" || s.Val == "sql_ident")
		}
	}
	return false
}

// constantArgs reports whether every argument of a filter call is a literal.
func constantArgs(f *nodes.FilterCall) bool {
	isConst := func(e nodes.Expression) bool {
		switch e.(type) {
		case *nodes.String, *nodes.Integer, *nodes.Float, *nodes.Bool, *nodes.None:
			return true
		}
		return false
	}
	for _, a := range f.Args {
		if !isConst(a) {
			return false
		}
	}
	for _, a := range f.Kwargs {
		if !isConst(a) {
			return false
		}
	}
	return true
}

// filterSQLLiteral is the sql_literal filter: the value as a SQL literal that Postgres
// and DuckDB read back as the same value.
func filterSQLLiteral(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	return sqlLiteral(v)
}

// sqlLiteral quotes v as a SQL literal: undefined and none are NULL; booleans TRUE and
// FALSE; numbers as written (a negative number in parentheses, so that a "-" before it
// cannot make a comment); NaN and the infinities as a cast of their quoted names;
// strings between single quotes with each quote doubled (standard_conforming_strings, so
// a backslash is an ordinary character); lists and mappings as their JSON text, quoted
// the same way. A NUL character or text that is not UTF-8 is an error.
func sqlLiteral(v any) (string, error) {
	switch x := norm(v).(type) {
	case nil, undef:
		return "NULL", nil
	case bool:
		if x {
			return "TRUE", nil
		}
		return "FALSE", nil
	case int64:
		return signed(strconv.FormatInt(x, 10)), nil
	case float64:
		switch {
		case math.IsNaN(x):
			return "CAST('NaN' AS DOUBLE PRECISION)", nil
		case math.IsInf(x, 1):
			return "CAST('Infinity' AS DOUBLE PRECISION)", nil
		case math.IsInf(x, -1):
			return "CAST('-Infinity' AS DOUBLE PRECISION)", nil
		}
		return signed(pyFloat(x)), nil
	case string:
		return quoteSQL(x, '\'', "a string")
	case []any, map[string]any, *namespace:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(export(x)); err != nil {
			return "", err
		}
		return quoteSQL(strings.TrimSuffix(buf.String(), "\n"), '\'', "a value")
	}
	return "", fmt.Errorf("cannot write a %s as a SQL literal", typeName(v))
}

// signed parenthesises a negative number.
func signed(s string) string {
	if strings.HasPrefix(s, "-") {
		return "(" + s + ")"
	}
	return s
}

// quoteSQL encloses s in q, doubling every q inside.
func quoteSQL(s string, q byte, what string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", fmt.Errorf("%s holding a NUL character cannot be written in SQL", what)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%s that is not valid UTF-8 cannot be written in SQL", what)
	}
	qs := string(q)
	return qs + strings.ReplaceAll(s, qs, qs+qs) + qs, nil
}

// filterSQLIdent is the sql_ident filter: a name as a quoted SQL identifier. With
// dotted=true a string is split at each "." into a qualified name (schema.table), each
// part quoted; a list of strings is always a qualified name.
func filterSQLIdent(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	dotted := truthy(param(args, kwargs, 0, "dotted", false))
	var parts []string
	switch x := v.(type) {
	case string:
		parts = []string{x}
		if dotted {
			parts = strings.Split(x, ".")
		}
	case []any:
		for _, e := range x {
			s, ok := norm(e).(string)
			if !ok {
				return nil, fmt.Errorf("a qualified name must be a list of strings, not one holding a %s", typeName(e))
			}
			parts = append(parts, s)
		}
		if len(parts) == 0 {
			return nil, errors.New("an empty list is not a name")
		}
	case undef:
		if x.name != "" {
			return nil, fmt.Errorf("%s is undefined, not a name", x.name)
		}
		return nil, errors.New("an undefined value is not a name")
	case nil:
		return nil, errors.New("a null is not a name")
	default:
		return nil, fmt.Errorf("a name must be a string, not a %s", typeName(v))
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		if p == "" {
			return nil, errors.New("an empty name cannot be a SQL identifier")
		}
		q, err := quoteSQL(p, '"', "a name")
		if err != nil {
			return nil, err
		}
		quoted[i] = q
	}
	return strings.Join(quoted, "."), nil
}
