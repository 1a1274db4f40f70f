package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/nodes"
)

// Splice is one template output spliced into SQL text unquoted.
type Splice struct {
	// Text is the template's source, such as {{ workload.t }}.
	Text string
	// Line is its 1-based line inside the SQL text.
	Line int
}

// SQLSplices returns the outputs of template src whose value is not quoted for SQL (by
// sql_literal or sql_ident, a number filter, or a constant), in order, including those
// inside the bodies of if and for tags. A template that does not compile has none: Parse
// warns about it elsewhere.
func SQLSplices(src string) []Splice {
	c := compileTemplate(src)
	if c.err != nil {
		return nil
	}
	var out []Splice
	unsafeSQLOutputs(src, c.root.Nodes, &out)
	return out
}

// unsafeSQLOutputs appends the outputs among ns (and inside the bodies of if and for
// tags) whose value is not quoted for SQL.
func unsafeSQLOutputs(src string, ns []nodes.Node, out *[]Splice) {
	for _, n := range ns {
		switch x := n.(type) {
		case *nodes.Output:
			if !safeSQLOutput(x) {
				*out = append(*out, Splice{Text: outputSource(src, x), Line: max(x.Start.Line, 1)})
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
	return "", fmt.Errorf("cannot write a %s as a SQL literal", TypeName(v))
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
				return nil, fmt.Errorf("a qualified name must be a list of strings, not one holding a %s", TypeName(e))
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
		return nil, fmt.Errorf("a name must be a string, not a %s", TypeName(v))
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
