package template

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// undef is the value of an undefined name or a missing attribute. It is
// chainable: attributes and items of undef are undef.
type undef struct{ name string }

// namespace is the mutable object made by namespace(...).
type namespace struct{ vars map[string]any }

func isUndef(v any) bool {
	_, ok := v.(undef)
	return ok
}

// norm converts a Go value from a caller's context to the evaluator's value
// set: nil, bool, int64, float64, string, []any, map[string]any (plus the
// evaluator's own undef and *namespace). Other values are left opaque.
func norm(v any) any {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, []any, map[string]any, undef, *namespace:
		return v
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x)
		}
		return float64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return float64(x)
	case float32:
		return float64(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return out
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return v
		}
		if rv.IsNil() {
			return nil
		}
		out := make(map[string]any, rv.Len())
		it := rv.MapRange()
		for it.Next() {
			out[it.Key().String()] = it.Value().Interface()
		}
		return out
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
	case reflect.String:
		return rv.String()
	case reflect.Bool:
		return rv.Bool()
	}
	return v
}

// export converts an evaluator value to a JSON-like result: undef becomes
// nil, namespaces become maps, and containers are normalised recursively.
func export(v any) any {
	switch x := norm(v).(type) {
	case undef:
		return nil
	case *namespace:
		return export(x.vars)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = export(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = export(e)
		}
		return out
	default:
		return x
	}
}

// truthy is Jinja truthiness.
func truthy(v any) bool {
	switch x := norm(v).(type) {
	case nil, undef:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// TypeName is the Python-like type name used in error messages.
func TypeName(v any) string {
	switch norm(v).(type) {
	case nil:
		return "NoneType"
	case undef:
		return "Undefined"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case map[string]any:
		return "dict"
	case *namespace:
		return "Namespace"
	}
	return fmt.Sprintf("%T", v)
}

// toString is Jinja's str() of a value, as printed in mixed templates.
func toString(v any) string {
	switch x := norm(v).(type) {
	case undef:
		return ""
	case nil:
		return "None"
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return pyFloat(x)
	case []any, map[string]any:
		var b strings.Builder
		writeRepr(&b, x)
		return b.String()
	case *namespace:
		return "<Namespace>"
	}
	return fmt.Sprint(v)
}

// pyFloat formats a float the way Python's repr does.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	abs := math.Abs(f)
	if abs >= 1e-4 && abs < 1e16 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	// Python writes 1e+16 and 1e-05, as Go does.
	return strconv.FormatFloat(f, 'e', -1, 64)
}

// writeRepr writes Python's repr of v.
func writeRepr(b *strings.Builder, v any) {
	switch x := norm(v).(type) {
	case string:
		b.WriteString(pyQuote(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for i, k := range sortedKeys(x) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pyQuote(k))
			b.WriteString(": ")
			writeRepr(b, x[k])
		}
		b.WriteByte('}')
	case undef:
		b.WriteString("Undefined")
	default:
		b.WriteString(toString(x))
	}
}

// pyQuote quotes s as Python's repr does.
func pyQuote(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteByte(q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteByte(q)
	return b.String()
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// number returns v as a number: ints (and bools, as in Python) as int64,
// floats as float64.
func number(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := norm(v).(type) {
	case int64:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	}
	return 0, 0, false, false
}

func asFloat(v any) (float64, bool) {
	i, f, isF, ok := number(v)
	if !ok {
		return 0, false
	}
	if isF {
		return f, true
	}
	return float64(i), true
}

// equal is Python equality on evaluator values.
func equal(a, b any) bool {
	a, b = norm(a), norm(b)
	if _, ok := a.(undef); ok {
		_, ub := b.(undef)
		return ub
	}
	if isUndef(b) {
		return false
	}
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if ai, af, aF, aok := number(a); aok {
		bi, bf, bF, bok := number(b)
		if !bok {
			return false
		}
		switch {
		case !aF && !bF:
			return ai == bi
		case aF && bF:
			return af == bf
		case aF:
			return af == float64(bi)
		default:
			return float64(ai) == bf
		}
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	case *namespace:
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// compare orders a and b as Python does; it fails for values Python cannot
// order (mixed types, None, undefined).
func compare(op string, a, b any) (int, error) {
	a, b = norm(a), norm(b)
	if af, aok := asFloat(a); aok {
		if bf, bok := asFloat(b); bok {
			ai, _, aF, _ := number(a)
			bi, _, bF, _ := number(b)
			if !aF && !bF {
				return cmpInt(ai, bi), nil
			}
			switch {
			case af < bf:
				return -1, nil
			case af > bf:
				return 1, nil
			}
			return 0, nil
		}
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			for i := 0; i < len(x) && i < len(y); i++ {
				if equal(x[i], y[i]) {
					continue
				}
				return compare(op, x[i], y[i])
			}
			return cmpInt(int64(len(x)), int64(len(y))), nil
		}
	}
	return 0, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, TypeName(a), TypeName(b))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
