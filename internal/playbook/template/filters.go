package template

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// filterFunc implements one filter: v | name(args, kwargs).
type filterFunc func(st *state, v any, args []any, kwargs map[string]any) (any, error)

// testFunc implements one test: v is name(args).
type testFunc func(v any, args []any) (bool, error)

var (
	filters map[string]filterFunc
	tests   map[string]testFunc
)

// FilterNames returns the names of the filters templates may use, sorted.
func FilterNames() []string {
	names := make([]string, 0, len(filters))
	for n := range filters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func init() {
	filters = map[string]filterFunc{
		"default":    filterDefault,
		"d":          filterDefault,
		"tojson":     filterToJSON,
		"to_json":    filterToJSON,
		"fromjson":   filterFromJSON,
		"from_json":  filterFromJSON,
		"b64encode":  strFilter(func(s string) (any, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil }),
		"b64decode":  strFilter(b64decode),
		"int":        filterInt,
		"float":      filterFloat,
		"bool":       filterBool,
		"string":     func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return toString(v), nil },
		"lower":      strFilter(func(s string) (any, error) { return strings.ToLower(s), nil }),
		"upper":      strFilter(func(s string) (any, error) { return strings.ToUpper(s), nil }),
		"capitalize": strFilter(func(s string) (any, error) { return capitalizeString(s), nil }),
		"title":      strFilter(func(s string) (any, error) { return titleString(s), nil }),
		"trim":       filterTrim,
		"strip":      filterTrim,
		"split":      filterSplit,
		"replace":    filterReplace,
		"join":       filterJoin,
		"first":      filterFirst,
		"last":       filterLast,
		"length":     filterLength,
		"count":      filterLength,
		"keys":       mapFilter(keysOf),
		"values":     mapFilter(valuesOf),
		"items":      mapFilter(itemsOf),
		"list":       filterList,
		"abs":        filterAbs,
		"round":      filterRound,
		"sort":       filterSort,
		"unique":     filterUnique,
		"reverse":    filterReverse,
		"min":        minMax(-1),
		"max":        minMax(1),
		"sum":        filterSum,
		"map":        filterMap,
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"attr":       filterAttr,
		"urlencode":  filterURLEncode,
		"escape":     strFilter(func(s string) (any, error) { return html.EscapeString(s), nil }),
		"e":          strFilter(func(s string) (any, error) { return html.EscapeString(s), nil }),
		"safe":       func(_ *state, v any, _ []any, _ map[string]any) (any, error) { return v, nil },
		// SQL quoting (sql.go): a value as a literal, a name as an identifier.
		"sql_literal": filterSQLLiteral,
		"sql_ident":   filterSQLIdent,
	}
	tests = map[string]testFunc{
		"defined":     func(v any, _ []any) (bool, error) { return !isUndef(v), nil },
		"undefined":   func(v any, _ []any) (bool, error) { return isUndef(v), nil },
		"none":        func(v any, _ []any) (bool, error) { return norm(v) == nil, nil },
		"boolean":     typeTest(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":        func(v any, _ []any) (bool, error) { b, ok := norm(v).(bool); return ok && b, nil },
		"false":       func(v any, _ []any) (bool, error) { b, ok := norm(v).(bool); return ok && !b, nil },
		"integer":     typeTest(func(v any) bool { _, ok := v.(int64); return ok }),
		"float":       typeTest(func(v any) bool { _, ok := v.(float64); return ok }),
		"number":      typeTest(func(v any) bool { _, ok1 := v.(int64); _, ok2 := v.(float64); return ok1 || ok2 }),
		"string":      typeTest(func(v any) bool { _, ok := v.(string); return ok }),
		"mapping":     typeTest(func(v any) bool { _, ok := v.(map[string]any); return ok }),
		"sequence":    typeTest(isIterable),
		"iterable":    typeTest(isIterable),
		"callable":    func(any, []any) (bool, error) { return false, nil },
		"in":          testIn,
		"eq":          cmpTest("==", func(c int) bool { return c == 0 }),
		"equalto":     cmpTest("==", func(c int) bool { return c == 0 }),
		"==":          cmpTest("==", func(c int) bool { return c == 0 }),
		"ne":          cmpTest("!=", func(c int) bool { return c != 0 }),
		"!=":          cmpTest("!=", func(c int) bool { return c != 0 }),
		"lt":          cmpTest("<", func(c int) bool { return c < 0 }),
		"lessthan":    cmpTest("<", func(c int) bool { return c < 0 }),
		"<":           cmpTest("<", func(c int) bool { return c < 0 }),
		"le":          cmpTest("<=", func(c int) bool { return c <= 0 }),
		"<=":          cmpTest("<=", func(c int) bool { return c <= 0 }),
		"gt":          cmpTest(">", func(c int) bool { return c > 0 }),
		"greaterthan": cmpTest(">", func(c int) bool { return c > 0 }),
		">":           cmpTest(">", func(c int) bool { return c > 0 }),
		"ge":          cmpTest(">=", func(c int) bool { return c >= 0 }),
		">=":          cmpTest(">=", func(c int) bool { return c >= 0 }),
		"odd":         intTest(func(i int64) bool { return i%2 != 0 }),
		"even":        intTest(func(i int64) bool { return i%2 == 0 }),
		"divisibleby": testDivisible,
		"sameas":      testSameAs,
		"lower":       typeTest(func(v any) bool { s, ok := v.(string); return ok && s == strings.ToLower(s) }),
		"upper":       typeTest(func(v any) bool { s, ok := v.(string); return ok && s == strings.ToUpper(s) }),
		"filter":      func(v any, _ []any) (bool, error) { s, ok := norm(v).(string); return ok && filters[s] != nil, nil },
		"test":        func(v any, _ []any) (bool, error) { s, ok := norm(v).(string); return ok && tests[s] != nil, nil },
	}
}

func (st *state) applyFilter(name string, v any, args []any, kwargs map[string]any) (any, error) {
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("unknown filter %q", name)
	}
	out, err := f(st, norm(v), args, kwargs)
	if err != nil {
		return nil, fmt.Errorf("filter %s: %w", name, err)
	}
	return out, nil
}

func (st *state) applyTest(name string, v any, args []any, _ map[string]any) (any, error) {
	t, ok := tests[name]
	if !ok {
		return nil, fmt.Errorf("unknown test %q", name)
	}
	ok, err := t(norm(v), args)
	if err != nil {
		return nil, fmt.Errorf("test %s: %w", name, err)
	}
	return ok, nil
}

// param returns positional argument i, else keyword key, else def.
func param(args []any, kwargs map[string]any, i int, key string, def any) any {
	if i < len(args) {
		return norm(args[i])
	}
	if v, ok := kwargs[key]; ok {
		return norm(v)
	}
	return def
}

func strFilter(fn func(string) (any, error)) filterFunc {
	return func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
		return fn(toString(v))
	}
}

func mapFilter(fn func(map[string]any) []any) filterFunc {
	return func(_ *state, v any, _ []any, _ map[string]any) (any, error) {
		switch x := v.(type) {
		case map[string]any:
			return fn(x), nil
		case *namespace:
			return fn(x.vars), nil
		case undef:
			return []any{}, nil
		}
		return nil, fmt.Errorf("'%s' object is not a mapping", TypeName(v))
	}
}

func filterDefault(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	def := param(args, kwargs, 0, "default_value", "")
	boolean := truthy(param(args, kwargs, 1, "boolean", false))
	if isUndef(v) || v == nil || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func filterToJSON(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if ind, ok := param(args, kwargs, 0, "indent", nil).(int64); ok && ind > 0 {
		enc.SetIndent("", strings.Repeat(" ", int(min(ind, 16))))
	}
	if err := enc.Encode(export(v)); err != nil {
		return nil, err
	}
	if buf.Len() > MaxOutput {
		return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
	}
	out := strings.TrimSuffix(buf.String(), "\n")
	// Like Jinja's htmlsafe_json_dumps, which also escapes single quotes.
	return strings.ReplaceAll(out, "'", `\u0027`), nil
}

func filterFromJSON(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	s, ok := v.(string)
	if !ok {
		if isUndef(v) {
			return v, nil
		}
		return nil, fmt.Errorf("expected a string, got %s", TypeName(v))
	}
	return decodeJSON(s)
}

// decodeJSON decodes JSON with integers as int64 and other numbers as
// float64.
func decodeJSON(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return normNumbers(out), nil
}

func normNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return norm(x)
	case []any:
		for i, e := range x {
			x[i] = normNumbers(e)
		}
	case map[string]any:
		for k, e := range x {
			x[k] = normNumbers(e)
		}
	}
	return v
}

func b64decode(s string) (any, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return string(b), nil
		}
	}
	return nil, errors.New("invalid base64 input")
}

func filterInt(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	def := param(args, kwargs, 0, "default", int64(0))
	base, _ := param(args, kwargs, 1, "base", int64(10)).(int64)
	switch x := v.(type) {
	case int64:
		return x, nil
	case bool:
		if x {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) >= 9.2e18 {
			return def, nil
		}
		return int64(x), nil
	case string:
		s := strings.TrimSpace(x)
		if base == 10 || base == 0 {
			s = strings.ReplaceAll(s, "_", "")
		}
		if i, err := strconv.ParseInt(s, int(base), 64); err == nil {
			return i, nil
		}
		if base == 10 {
			if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && math.Abs(f) < 9.2e18 {
				return int64(f), nil
			}
		}
	}
	return def, nil
}

func filterFloat(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	def := param(args, kwargs, 0, "default", 0.0)
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case bool:
		if x {
			return 1.0, nil
		}
		return 0.0, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

func filterBool(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "yes", "on", "1", "y":
			return true, nil
		case "false", "no", "off", "0", "n", "", "none", "null":
			return false, nil
		}
	}
	return truthy(v), nil
}

func filterTrim(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	return stripString("strip", toString(v), param(args, kwargs, 0, "chars", nil))
}

func filterSplit(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	if isUndef(v) {
		return []any{}, nil
	}
	return splitString(toString(v), param(args, kwargs, 0, "sep", nil), param(args, kwargs, 1, "maxsplit", int64(-1)))
}

func filterReplace(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	old := param(args, kwargs, 0, "old", nil)
	nw := param(args, kwargs, 1, "new", nil)
	if _, ok := old.(string); !ok {
		old = toString(old)
	}
	if _, ok := nw.(string); !ok {
		nw = toString(nw)
	}
	return replaceString(toString(v), old, nw, param(args, kwargs, 2, "count", int64(-1)))
}

// seqOf returns v as a list: lists as is, strings as characters, maps as
// sorted keys, undefined as empty.
func seqOf(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		out := make([]any, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case map[string]any:
		return keysOf(x), nil
	case undef:
		return []any{}, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", TypeName(v))
}

func isIterable(v any) bool {
	switch v.(type) {
	case []any, string, map[string]any:
		return true
	}
	return false
}

// attrPath reads a dotted attribute path ("a.b.0") from v.
func attrPath(v any, path string) any {
	for part := range strings.SplitSeq(path, ".") {
		if i, err := strconv.ParseInt(part, 10, 64); err == nil {
			if _, isList := norm(v).([]any); isList {
				v = getItem(v, i)
				continue
			}
		}
		v = getAttr(v, part)
	}
	return v
}

func filterJoin(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	if a, ok := param(args, kwargs, 1, "attribute", nil).(string); ok {
		mapped := make([]any, len(l))
		for i, e := range l {
			mapped[i] = attrPath(e, a)
		}
		l = mapped
	}
	return joinList(l, toString(param(args, kwargs, 0, "d", "")))
}

func filterFirst(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return undef{name: "first"}, nil
	}
	return norm(l[0]), nil
}

func filterLast(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return undef{name: "last"}, nil
	}
	return norm(l[len(l)-1]), nil
}

func filterLength(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		return int64(len([]rune(x))), nil
	case []any:
		return int64(len(x)), nil
	case map[string]any:
		return int64(len(x)), nil
	case *namespace:
		return int64(len(x.vars)), nil
	case undef:
		return int64(0), nil
	}
	return nil, fmt.Errorf("object of type '%s' has no len()", TypeName(v))
}

func filterList(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	return slices.Clone(l), nil
}

func filterAbs(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	i, f, isF, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", TypeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i < 0 {
		return -i, nil
	}
	return i, nil
}

func filterRound(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	f, ok := asFloat(v)
	if !ok {
		return nil, fmt.Errorf("cannot round a %s", TypeName(v))
	}
	prec, _ := param(args, kwargs, 0, "precision", int64(0)).(int64)
	method, _ := param(args, kwargs, 1, "method", "common").(string)
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		return math.Round(f*p) / p, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("method must be common, ceil or floor, not %q", method)
}

func sortKey(v any, attribute string, caseSensitive bool) any {
	if attribute != "" {
		v = attrPath(v, attribute)
	}
	if s, ok := norm(v).(string); ok && !caseSensitive {
		return strings.ToLower(s)
	}
	return v
}

func filterSort(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	reverse := truthy(param(args, kwargs, 0, "reverse", false))
	cs := truthy(param(args, kwargs, 1, "case_sensitive", false))
	attribute, _ := param(args, kwargs, 2, "attribute", "").(string)
	out := slices.Clone(l)
	var cmpErr error
	sort.SliceStable(out, func(i, j int) bool {
		c, err := compare("<", sortKey(out[i], attribute, cs), sortKey(out[j], attribute, cs))
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	return out, nil
}

func filterUnique(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(param(args, kwargs, 0, "case_sensitive", false))
	attribute, _ := param(args, kwargs, 1, "attribute", "").(string)
	var out, keys []any
	for _, e := range l {
		k := sortKey(e, attribute, cs)
		if slices.ContainsFunc(keys, func(x any) bool { return equal(x, k) }) {
			continue
		}
		keys = append(keys, k)
		out = append(out, e)
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

func filterReverse(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	if s, ok := v.(string); ok {
		r := []rune(s)
		slices.Reverse(r)
		return string(r), nil
	}
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(l)
	slices.Reverse(out)
	return out, nil
}

func minMax(sign int) filterFunc {
	return func(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
		l, err := seqOf(v)
		if err != nil {
			return nil, err
		}
		cs := truthy(param(args, kwargs, 0, "case_sensitive", false))
		attribute, _ := param(args, kwargs, 1, "attribute", "").(string)
		if len(l) == 0 {
			return undef{}, nil
		}
		best := l[0]
		for _, e := range l[1:] {
			c, err := compare("<", sortKey(e, attribute, cs), sortKey(best, attribute, cs))
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best = e
			}
		}
		return norm(best), nil
	}
}

func filterSum(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	attribute, _ := param(args, kwargs, 0, "attribute", "").(string)
	total := param(args, kwargs, 1, "start", int64(0))
	for _, e := range l {
		if attribute != "" {
			e = attrPath(e, attribute)
		}
		if total, err = arith("+", total, e); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterMap(st *state, v any, args []any, kwargs map[string]any) (any, error) {
	l, err := seqOf(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(l))
	if a, ok := kwargs["attribute"]; ok {
		path := toString(a)
		def, hasDef := kwargs["default"]
		for i, e := range l {
			out[i] = attrPath(e, path)
			if hasDef && isUndef(out[i]) {
				out[i] = def
			}
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, errors.New("map needs a filter name or attribute=")
	}
	name, ok := norm(args[0]).(string)
	if !ok {
		return nil, errors.New("map needs a filter name")
	}
	for i, e := range l {
		if err := st.tick(); err != nil {
			return nil, err
		}
		if out[i], err = st.applyFilter(name, e, args[1:], kwargs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(st *state, v any, args []any, _ map[string]any) (any, error) {
		l, err := seqOf(v)
		if err != nil {
			return nil, err
		}
		attribute := ""
		if byAttr {
			if len(args) == 0 {
				return nil, errors.New("missing attribute name")
			}
			attribute = toString(args[0])
			args = args[1:]
		}
		out := []any{}
		for _, e := range l {
			if err := st.tick(); err != nil {
				return nil, err
			}
			x := e
			if byAttr {
				x = attrPath(e, attribute)
			}
			var ok bool
			if len(args) == 0 {
				ok = truthy(x)
			} else {
				name, isStr := norm(args[0]).(string)
				if !isStr {
					return nil, errors.New("test name must be a string")
				}
				r, err := st.applyTest(name, x, args[1:], nil)
				if err != nil {
					return nil, err
				}
				ok = r.(bool)
			}
			if ok != reject {
				out = append(out, e)
			}
		}
		return out, nil
	}
}

func filterAttr(_ *state, v any, args []any, kwargs map[string]any) (any, error) {
	name := toString(param(args, kwargs, 0, "name", ""))
	if err := forbiddenAttr(name); err != nil {
		return nil, err
	}
	return getAttr(v, name), nil
}

func filterURLEncode(_ *state, v any, _ []any, _ map[string]any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range sortedKeys(x) {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(toString(x[k])))
		}
		return strings.Join(parts, "&"), nil
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			kv, ok := norm(e).([]any)
			if !ok || len(kv) != 2 {
				return nil, errors.New("urlencode needs a mapping or a list of pairs")
			}
			parts = append(parts, url.QueryEscape(toString(kv[0]))+"="+url.QueryEscape(toString(kv[1])))
		}
		return strings.Join(parts, "&"), nil
	}
	return strings.ReplaceAll(url.PathEscape(toString(v)), "%2F", "/"), nil
}

func typeTest(fn func(any) bool) testFunc {
	return func(v any, _ []any) (bool, error) { return fn(norm(v)), nil }
}

func testIn(v any, args []any) (bool, error) {
	if len(args) != 1 {
		return false, errors.New("in needs one container")
	}
	switch c := norm(args[0]).(type) {
	case undef:
		return false, nil
	case []any:
		return slices.ContainsFunc(c, func(e any) bool { return equal(e, v) }), nil
	case map[string]any:
		k, ok := v.(string)
		if !ok {
			return false, nil
		}
		_, found := c[k]
		return found, nil
	case *namespace:
		k, ok := v.(string)
		if !ok {
			return false, nil
		}
		_, found := c.vars[k]
		return found, nil
	case string:
		s, ok := v.(string)
		if !ok {
			if isUndef(v) {
				return false, nil
			}
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", TypeName(v))
		}
		return strings.Contains(c, s), nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", TypeName(args[0]))
}

func cmpTest(op string, ok func(int) bool) testFunc {
	return func(v any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("%s needs one argument", op)
		}
		if op == "==" || op == "!=" {
			eq := equal(v, args[0])
			return eq == (op == "=="), nil
		}
		if isUndef(v) || isUndef(args[0]) {
			return false, undefinedErr(op, v, args[0])
		}
		c, err := compare(op, v, args[0])
		if err != nil {
			return false, err
		}
		return ok(c), nil
	}
}

func intTest(fn func(int64) bool) testFunc {
	return func(v any, _ []any) (bool, error) {
		i, ok := norm(v).(int64)
		if !ok {
			return false, fmt.Errorf("expected an integer, got %s", TypeName(v))
		}
		return fn(i), nil
	}
}

func testDivisible(v any, args []any) (bool, error) {
	if len(args) != 1 {
		return false, errors.New("divisibleby needs one argument")
	}
	m, err := arith("%", v, args[0])
	if err != nil {
		return false, err
	}
	return equal(m, int64(0)), nil
}

func testSameAs(v any, args []any) (bool, error) {
	if len(args) != 1 {
		return false, errors.New("sameas needs one argument")
	}
	a, b := norm(v), norm(args[0])
	switch a.(type) {
	case nil, bool, int64, float64, string:
		return TypeName(a) == TypeName(b) && equal(a, b), nil
	}
	return false, nil
}
