package template

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// maxRange bounds the length of range(...).
const maxRange = 100000

// maxExprDepth bounds the evaluation recursion.
const maxExprDepth = 256

// state is the evaluation state of one Render, Eval or Truthy call.
type state struct {
	root     map[string]any
	deadline time.Time
	ticks    int
	outBytes int
	depth    int
	limit    time.Duration
}

func (r *Renderer) newState(ctx map[string]any) *state {
	return &state{root: ctx, deadline: time.Now().Add(r.timeLimit), limit: r.timeLimit}
}

// tick checks the time limit every few hundred evaluation steps.
func (st *state) tick() error {
	st.ticks++
	if st.ticks&255 == 0 && time.Now().After(st.deadline) {
		return fmt.Errorf("%w (%s)", ErrTimeLimit, st.limit)
	}
	return nil
}

// account charges the rough size of a typed result to the output budget.
func (st *state) account(v any) error {
	st.outBytes += approxSize(v, MaxOutput-st.outBytes+1)
	if st.outBytes > MaxOutput {
		return fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
	}
	return nil
}

// approxSize estimates the serialised size of v, stopping past limit.
func approxSize(v any, limit int) int {
	switch x := v.(type) {
	case string:
		return len(x) + 2
	case []any:
		n := 2
		for _, e := range x {
			if n > limit {
				break
			}
			n += approxSize(e, limit-n) + 1
		}
		return n
	case map[string]any:
		n := 2
		for k, e := range x {
			if n > limit {
				break
			}
			n += len(k) + 4 + approxSize(e, limit-n)
		}
		return n
	}
	return 8
}

// scope is one frame of template variables.
type scope struct {
	vars   map[string]any
	parent *scope
}

func (st *state) lookup(sc *scope, name string) any {
	for s := sc; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return norm(v)
		}
	}
	if v, ok := st.root[name]; ok {
		return norm(v)
	}
	return undef{name: name}
}

// output evaluates a {{ }} node to a typed value.
func (st *state) output(o *nodes.Output) (any, error) {
	return st.outputIn(o, &scope{vars: map[string]any{}})
}

func (st *state) outputIn(o *nodes.Output, sc *scope) (any, error) {
	if o.Condition != nil {
		c, err := st.expr(o.Condition, sc)
		if err != nil {
			return nil, err
		}
		if !truthy(c) {
			if o.Alternative == nil {
				return undef{}, nil
			}
			return st.expr(o.Alternative, sc)
		}
	}
	return st.expr(o.Expression, sc)
}

func (st *state) renderNodes(ns []nodes.Node, w *limitedWriter) error {
	return st.renderIn(ns, &scope{vars: map[string]any{}}, w)
}

func (st *state) renderIn(ns []nodes.Node, sc *scope, w *limitedWriter) error {
	for _, n := range ns {
		if err := st.tick(); err != nil {
			return err
		}
		switch x := n.(type) {
		case *nodes.Comment:
		case *nodes.Data:
			if err := w.WriteString(dataText(x)); err != nil {
				return err
			}
		case *nodes.Output:
			v, err := st.outputIn(x, sc)
			if err != nil {
				return err
			}
			if err := w.WriteString(toString(v)); err != nil {
				return err
			}
		case *nodes.ControlStructureBlock:
			if err := st.control(x, sc, w); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unsupported template node %T", n)
		}
	}
	return nil
}

// dataText applies the whitespace control the parser recorded on a Data node.
func dataText(n *nodes.Data) string {
	out := n.Data.Val
	if n.RemoveFirstLineReturn {
		out = strings.TrimPrefix(out, "\r\n")
		out = strings.TrimPrefix(out, "\n")
	}
	if n.Trim.Left {
		out = strings.TrimLeft(out, " \r\n\t")
	}
	if n.Trim.Right {
		out = strings.TrimRight(out, " \r\n\t")
	}
	if n.RemoveTrailingWhiteSpaceFromLastLine {
		i := strings.LastIndex(out, "\n") + 1
		out = out[:i] + strings.TrimRight(out[i:], " \n\t\r")
	}
	return out
}

func (st *state) control(b *nodes.ControlStructureBlock, sc *scope, w *limitedWriter) error {
	switch cs := b.ControlStructure.(type) {
	case *controlStructures.IfControlStructure:
		for i, cond := range cs.Conditions {
			v, err := st.expr(cond, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return st.renderIn(cs.Wrappers[i].Nodes, sc, w)
			}
		}
		if len(cs.Wrappers) > len(cs.Conditions) {
			return st.renderIn(cs.Wrappers[len(cs.Conditions)].Nodes, sc, w)
		}
		return nil
	case *controlStructures.ForControlStructure:
		return st.forLoop(cs, sc, w)
	case *setStmt:
		return st.set(cs, sc, w)
	case *rawStmt:
		return w.WriteString(cs.text)
	}
	return fmt.Errorf("unsupported control structure %q", b.Name)
}

func (st *state) forLoop(cs *controlStructures.ForControlStructure, sc *scope, w *limitedWriter) error {
	if cs.Recursive {
		return errors.New("recursive for loops are not supported")
	}
	obj, err := st.expr(cs.ObjectEvaluator, sc)
	if err != nil {
		return err
	}
	type pair struct{ k, v any }
	var items []pair
	add := func(k, v any) error {
		if err := st.tick(); err != nil {
			return err
		}
		if cs.IfCondition != nil {
			f := &scope{vars: map[string]any{cs.Key: k}, parent: sc}
			if cs.Value != "" {
				f.vars[cs.Value] = v
			}
			c, err := st.expr(cs.IfCondition, f)
			if err != nil {
				return err
			}
			if !truthy(c) {
				return nil
			}
		}
		items = append(items, pair{k, v})
		return nil
	}
	unpack := func(e any) error {
		if cs.Value == "" {
			return add(e, nil)
		}
		l, ok := norm(e).([]any)
		if !ok || len(l) != 2 {
			return fmt.Errorf("cannot unpack %s into %s, %s", TypeName(e), cs.Key, cs.Value)
		}
		return add(l[0], l[1])
	}
	switch x := norm(obj).(type) {
	case undef:
	case []any:
		for _, e := range x {
			if err := unpack(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range sortedKeys(x) {
			var err error
			if cs.Value != "" {
				err = add(k, x[k])
			} else {
				err = add(k, nil)
			}
			if err != nil {
				return err
			}
		}
	case string:
		for _, r := range x {
			if err := unpack(string(r)); err != nil {
				return err
			}
		}
	case *namespace:
		return errors.New("'Namespace' object is not iterable")
	default:
		return fmt.Errorf("'%s' object is not iterable", TypeName(obj))
	}
	if len(items) == 0 {
		if cs.EmptyWrapper != nil {
			return st.renderIn(cs.EmptyWrapper.Nodes, &scope{vars: map[string]any{}, parent: sc}, w)
		}
		return nil
	}
	n := int64(len(items))
	for i, it := range items {
		if err := st.tick(); err != nil {
			return err
		}
		loop := map[string]any{
			"index": int64(i) + 1, "index0": int64(i),
			"revindex": n - int64(i), "revindex0": n - int64(i) - 1,
			"first": i == 0, "last": int64(i) == n-1, "length": n,
			"depth": int64(1), "depth0": int64(0),
		}
		if i > 0 {
			loop["previtem"] = items[i-1].k
		}
		if int64(i) < n-1 {
			loop["nextitem"] = items[i+1].k
		}
		f := &scope{vars: map[string]any{cs.Key: it.k, "loop": loop}, parent: sc}
		if cs.Value != "" {
			f.vars[cs.Value] = it.v
		}
		if err := st.renderIn(cs.BodyWrapper.Nodes, f, w); err != nil {
			return err
		}
	}
	return nil
}

func (st *state) set(s *setStmt, sc *scope, w *limitedWriter) error {
	var v any
	if s.body != nil {
		var b strings.Builder
		if err := st.renderIn(s.body.Nodes, sc, &limitedWriter{b: &b, st: st}); err != nil {
			return err
		}
		v = b.String()
	} else {
		var err error
		expr := s.expr
		if s.cond != nil {
			c, err := st.expr(s.cond, sc)
			if err != nil {
				return err
			}
			if !truthy(c) {
				expr = s.alt
			}
		}
		if v, err = st.expr(expr, sc); err != nil {
			return err
		}
	}
	switch t := s.target.(type) {
	case *nodes.Name:
		sc.vars[t.Name.Val] = v
		return nil
	case *nodes.GetAttribute:
		obj, err := st.expr(t.Node, sc)
		if err != nil {
			return err
		}
		ns, ok := obj.(*namespace)
		if !ok || t.Attribute == "" {
			return fmt.Errorf("cannot assign attribute on a %s (only namespace objects)", TypeName(obj))
		}
		ns.vars[t.Attribute] = v
		return nil
	}
	return errors.New("invalid set target")
}

// expr evaluates an expression node.
func (st *state) expr(n nodes.Node, sc *scope) (any, error) {
	if err := st.tick(); err != nil {
		return nil, err
	}
	st.depth++
	defer func() { st.depth-- }()
	if st.depth > maxExprDepth {
		return nil, errors.New("expression nested too deeply")
	}
	switch x := n.(type) {
	case *nodes.None:
		return nil, nil
	case *nodes.String:
		return x.Val, nil
	case *nodes.Integer:
		return int64(x.Val), nil
	case *nodes.Float:
		return x.Val, nil
	case *nodes.Bool:
		return x.Val, nil
	case *nodes.List:
		return st.exprList(x.Val, sc)
	case *nodes.Tuple:
		return st.exprList(x.Val, sc)
	case *nodes.Dict:
		m := make(map[string]any, len(x.Pairs))
		for _, p := range x.Pairs {
			k, err := st.expr(p.Key, sc)
			if err != nil {
				return nil, err
			}
			v, err := st.expr(p.Value, sc)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				if isUndef(k) {
					return nil, fmt.Errorf("dict key %s is undefined", p.Key)
				}
				ks = toString(k)
			}
			m[ks] = v
		}
		return m, nil
	case *nodes.Name:
		v := st.lookup(sc, x.Name.Val)
		if isUndef(v) && jinjaGlobals[x.Name.Val] {
			return nil, forbiddenGlobal(x.Name.Val)
		}
		return v, nil
	case *nodes.GetAttribute:
		if err := forbiddenAttr(x.Attribute); err != nil {
			return nil, err
		}
		obj, err := st.expr(x.Node, sc)
		if err != nil {
			return nil, err
		}
		if x.Attribute != "" {
			return getAttr(obj, x.Attribute), nil
		}
		return getItem(obj, int64(x.Index)), nil
	case *nodes.GetItem:
		obj, err := st.expr(x.Node, sc)
		if err != nil {
			return nil, err
		}
		if x.Arg == nil {
			return nil, errors.New("empty subscript")
		}
		key, err := st.expr(x.Arg, sc)
		if err != nil {
			return nil, err
		}
		if k, ok := key.(string); ok {
			if err := forbiddenAttr(k); err != nil {
				return nil, err
			}
		}
		return getItem(obj, key), nil
	case *nodes.GetSlice:
		return st.slice(x, sc)
	case *nodes.Call:
		return st.call(x, sc)
	case *nodes.Negation:
		v, err := st.expr(x.Term, sc)
		if err != nil {
			return nil, err
		}
		return !truthy(v), nil
	case *nodes.UnaryExpression:
		v, err := st.expr(x.Term, sc)
		if err != nil {
			return nil, err
		}
		i, f, isF, ok := number(v)
		if !ok {
			return nil, fmt.Errorf("bad operand type for unary %s: '%s'", x.Operator.Val, TypeName(v))
		}
		switch {
		case !x.Negative && isF:
			return f, nil
		case !x.Negative:
			return i, nil
		case isF:
			return -f, nil
		}
		return -i, nil
	case *nodes.BinaryExpression:
		return st.binary(x, sc)
	case *nodes.FilteredExpression:
		v, err := st.expr(x.Expression, sc)
		if err != nil {
			return nil, err
		}
		for _, fc := range x.Filters {
			args, kwargs, err := st.args(fc.Args, fc.Kwargs, sc)
			if err != nil {
				return nil, err
			}
			if v, err = st.applyFilter(fc.Name, v, args, kwargs); err != nil {
				return nil, err
			}
		}
		return v, nil
	case *nodes.TestExpression:
		v, err := st.expr(x.Expression, sc)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := st.args(x.Test.Args, x.Test.Kwargs, sc)
		if err != nil {
			return nil, err
		}
		return st.applyTest(x.Test.Name, v, args, kwargs)
	case *nodes.Error:
		return nil, x.Error
	}
	return nil, fmt.Errorf("unsupported expression %T", n)
}

func (st *state) exprList(es []nodes.Expression, sc *scope) ([]any, error) {
	out := make([]any, len(es))
	for i, e := range es {
		v, err := st.expr(e, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (st *state) args(pos []nodes.Expression, kw map[string]nodes.Expression, sc *scope) ([]any, map[string]any, error) {
	args, err := st.exprList(pos, sc)
	if err != nil {
		return nil, nil, err
	}
	var kwargs map[string]any
	if len(kw) > 0 {
		kwargs = make(map[string]any, len(kw))
		for k, e := range kw {
			v, err := st.expr(e, sc)
			if err != nil {
				return nil, nil, err
			}
			kwargs[k] = v
		}
	}
	return args, kwargs, nil
}

// getAttr is attribute access with chainable undefined: a missing
// attribute, or any attribute of undefined or None, is undefined.
func getAttr(obj any, name string) any {
	switch x := norm(obj).(type) {
	case map[string]any:
		if v, ok := x[name]; ok {
			return norm(v)
		}
	case *namespace:
		if v, ok := x.vars[name]; ok {
			return norm(v)
		}
	}
	return undef{name: name}
}

// getItem is subscript access with chainable undefined.
func getItem(obj any, key any) any {
	key = norm(key)
	switch x := norm(obj).(type) {
	case map[string]any:
		if k, ok := key.(string); ok {
			if v, ok := x[k]; ok {
				return norm(v)
			}
		}
	case *namespace:
		if k, ok := key.(string); ok {
			if v, ok := x.vars[k]; ok {
				return norm(v)
			}
		}
	case []any:
		if i, ok := index(key, len(x)); ok {
			return norm(x[i])
		}
	case string:
		if _, isInt := key.(int64); isInt {
			rs := []rune(x)
			if i, ok := index(key, len(rs)); ok {
				return string(rs[i])
			}
		}
	}
	return undef{name: toString(key)}
}

func index(key any, n int) (int, bool) {
	i, ok := key.(int64)
	if !ok {
		return 0, false
	}
	if i < 0 {
		i += int64(n)
	}
	if i < 0 || i >= int64(n) {
		return 0, false
	}
	return int(i), true
}

func (st *state) slice(x *nodes.GetSlice, sc *scope) (any, error) {
	obj, err := st.expr(x.Node, sc)
	if err != nil {
		return nil, err
	}
	bound := func(n nodes.Node) (int64, bool, error) {
		if n == nil {
			return 0, false, nil
		}
		v, err := st.expr(n, sc)
		if err != nil {
			return 0, false, err
		}
		if v == nil || isUndef(v) {
			return 0, false, nil
		}
		i, ok := norm(v).(int64)
		if !ok {
			return 0, false, fmt.Errorf("slice indices must be integers, not %s", TypeName(v))
		}
		return i, true, nil
	}
	start, hasStart, err := bound(x.Start)
	if err != nil {
		return nil, err
	}
	stop, hasStop, err := bound(x.End)
	if err != nil {
		return nil, err
	}
	step, hasStep, err := bound(x.Step)
	if err != nil {
		return nil, err
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	var seq []any
	var runes []rune
	isStr := false
	switch v := norm(obj).(type) {
	case undef:
		return v, nil
	case []any:
		seq = v
	case string:
		runes, isStr = []rune(v), true
	default:
		return nil, fmt.Errorf("'%s' object is not subscriptable", TypeName(obj))
	}
	n := int64(len(seq))
	if isStr {
		n = int64(len(runes))
	}
	lo, hi := sliceBounds(n, start, stop, step, hasStart, hasStop)
	var idx []int64
	if step > 0 {
		for i := lo; i < hi; i += step {
			idx = append(idx, i)
		}
	} else {
		for i := lo; i > hi; i += step {
			idx = append(idx, i)
		}
	}
	if isStr {
		var b strings.Builder
		for _, i := range idx {
			b.WriteRune(runes[i])
		}
		return b.String(), nil
	}
	out := make([]any, len(idx))
	for j, i := range idx {
		out[j] = seq[i]
	}
	return out, nil
}

// sliceBounds follows Python's slice.indices.
func sliceBounds(n, start, stop, step int64, hasStart, hasStop bool) (int64, int64) {
	clamp := func(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }
	if step > 0 {
		lo, hi := int64(0), n
		if hasStart {
			if start < 0 {
				start += n
			}
			lo = clamp(start, 0, n)
		}
		if hasStop {
			if stop < 0 {
				stop += n
			}
			hi = clamp(stop, 0, n)
		}
		return lo, hi
	}
	lo, hi := n-1, int64(-1)
	if hasStart {
		if start < 0 {
			start += n
		}
		lo = clamp(start, -1, n-1)
	}
	if hasStop {
		if stop < 0 {
			stop += n
		}
		hi = clamp(stop, -1, n-1)
	}
	return lo, hi
}

func (st *state) binary(x *nodes.BinaryExpression, sc *scope) (any, error) {
	left, err := st.expr(x.Left, sc)
	if err != nil {
		return nil, err
	}
	op := x.Operator.Token
	switch op.Type {
	case tokens.And:
		if !truthy(left) {
			return left, nil
		}
		return st.expr(x.Right, sc)
	case tokens.Or:
		if truthy(left) {
			return left, nil
		}
		return st.expr(x.Right, sc)
	}
	right, err := st.expr(x.Right, sc)
	if err != nil {
		return nil, err
	}
	switch op.Type {
	case tokens.Equals:
		return equal(left, right), nil
	case tokens.Ne:
		return !equal(left, right), nil
	case tokens.LowerThan, tokens.LowerThanOrEqual, tokens.GreaterThan, tokens.GreaterThanOrEqual:
		if isUndef(left) || isUndef(right) {
			return nil, undefinedErr(op.Val, left, right)
		}
		c, err := compare(op.Val, left, right)
		if err != nil {
			return nil, err
		}
		switch op.Type {
		case tokens.LowerThan:
			return c < 0, nil
		case tokens.LowerThanOrEqual:
			return c <= 0, nil
		case tokens.GreaterThan:
			return c > 0, nil
		}
		return c >= 0, nil
	case tokens.Tilde:
		s := toString(left) + toString(right)
		if len(s) > MaxOutput {
			return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
		}
		return s, nil
	}
	return arith(op.Val, left, right)
}

func undefinedErr(op string, a, b any) error {
	u, ok := a.(undef)
	if !ok {
		u, _ = b.(undef)
	}
	if u.name != "" {
		return fmt.Errorf("%q is undefined (in %s)", u.name, op)
	}
	return fmt.Errorf("undefined value (in %s)", op)
}

// arith applies an arithmetic operator with Python semantics: int op int
// stays int (except /), anything with a float is a float, strings and lists
// concatenate and repeat, and every other combination is a type error.
func arith(op string, a, b any) (any, error) {
	a, b = norm(a), norm(b)
	if isUndef(a) || isUndef(b) {
		return nil, undefinedErr(op, a, b)
	}
	ai, af, aF, aNum := number(a)
	bi, bf, bF, bNum := number(b)
	if aNum && bNum {
		if aF || bF {
			x, y := af, bf
			if !aF {
				x = float64(ai)
			}
			if !bF {
				y = float64(bi)
			}
			return floatOp(op, x, y)
		}
		return intOp(op, ai, bi)
	}
	switch op {
	case "+":
		switch x := a.(type) {
		case string:
			if y, ok := b.(string); ok {
				if len(x)+len(y) > MaxOutput {
					return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
				}
				return x + y, nil
			}
		case []any:
			if y, ok := b.([]any); ok {
				if len(x)+len(y) > MaxOutput {
					return nil, fmt.Errorf("%w (%d items)", ErrOutputLimit, MaxOutput)
				}
				out := make([]any, 0, len(x)+len(y))
				return append(append(out, x...), y...), nil
			}
		}
	case "*":
		seq, count := a, b
		if _, isInt := count.(int64); !isInt {
			seq, count = b, a
		}
		n, isInt := count.(int64)
		if isInt {
			if n < 0 {
				n = 0
			}
			switch x := seq.(type) {
			case string:
				if repeatOver(len(x), n) {
					return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
				}
				return strings.Repeat(x, int(n)), nil
			case []any:
				if repeatOver(len(x), n) {
					return nil, fmt.Errorf("%w (%d items)", ErrOutputLimit, MaxOutput)
				}
				if len(x) == 0 {
					return []any{}, nil // n may be huge: nothing to repeat, no loop
				}
				out := make([]any, 0, len(x)*int(n))
				for range n {
					out = append(out, x...)
				}
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, TypeName(a), TypeName(b))
}

// repeatOver reports whether size repeated n times (n >= 0) exceeds MaxOutput, without
// computing size*n, which overflows for a large n ("ab" * 2**62 would wrap to a negative
// length, pass a naive check and panic in strings.Repeat).
func repeatOver(size int, n int64) bool {
	return size > 0 && n > 0 && int64(size) > MaxOutput/n
}

func intOp(op string, a, b int64) (any, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) == (b > 0) {
			return s, nil
		}
		return float64(a) + float64(b), nil
	case "-":
		s := a - b
		if (s < a) == (b > 0) {
			return s, nil
		}
		return float64(a) - float64(b), nil
	case "*":
		if a == 0 || b == 0 {
			return int64(0), nil
		}
		p := a * b
		if p/b == a && !(a == -1 && b == math.MinInt64) && !(b == -1 && a == math.MinInt64) {
			return p, nil
		}
		return float64(a) * float64(b), nil
	case "/":
		if b == 0 {
			return nil, errors.New("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q, nil
	case "%":
		if b == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		m := a % b
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		if b < 0 {
			return math.Pow(float64(a), float64(b)), nil
		}
		r := int64(1)
		base := a
		for e := b; e > 0; e >>= 1 {
			if e&1 == 1 {
				if base != 0 && (r*base)/base != r {
					return math.Pow(float64(a), float64(b)), nil
				}
				r *= base
			}
			if e > 1 {
				if base != 0 && (base*base)/base != base {
					return math.Pow(float64(a), float64(b)), nil
				}
				base *= base
			}
		}
		return r, nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errors.New("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, errors.New("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, errors.New("float modulo by zero")
		}
		m := math.Mod(a, b)
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		return math.Pow(a, b), nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

// call evaluates a method call or a global function call.
func (st *state) call(x *nodes.Call, sc *scope) (any, error) {
	args, kwargs, err := st.args(x.Args, x.Kwargs, sc)
	if err != nil {
		return nil, err
	}
	switch fn := x.Func.(type) {
	case *nodes.GetAttribute:
		if fn.Attribute == "" {
			break
		}
		recv, err := st.expr(fn.Node, sc)
		if err != nil {
			return nil, err
		}
		return callMethod(recv, fn.Attribute, args, kwargs)
	case *nodes.Name:
		if g, ok := globals[fn.Name.Val]; ok {
			return g(args, kwargs)
		}
		return nil, fmt.Errorf("unknown function %q", fn.Name.Val)
	}
	return nil, fmt.Errorf("%s is not callable", x.Func)
}

var globals map[string]func(args []any, kwargs map[string]any) (any, error)

func init() {
	globals = map[string]func([]any, map[string]any) (any, error){
		"range":     rangeFn,
		"dict":      func(_ []any, kw map[string]any) (any, error) { return copyMap(kw), nil },
		"namespace": func(_ []any, kw map[string]any) (any, error) { return &namespace{vars: copyMap(kw)}, nil },
	}
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func rangeFn(args []any, _ map[string]any) (any, error) {
	ints := make([]int64, len(args))
	for i, a := range args {
		v, ok := norm(a).(int64)
		if !ok {
			return nil, fmt.Errorf("range() arguments must be integers, not %s", TypeName(a))
		}
		ints[i] = v
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, fmt.Errorf("range() takes 1 to 3 arguments, got %d", len(ints))
	}
	if step == 0 {
		return nil, errors.New("range() step must not be zero")
	}
	var n int64
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if n > maxRange {
		return nil, fmt.Errorf("range() of %d items exceeds the limit of %d", n, maxRange)
	}
	out := make([]any, n)
	for i := range out {
		out[i] = start + int64(i)*step
	}
	return out, nil
}

func callMethod(recv any, name string, args []any, kwargs map[string]any) (any, error) {
	arg := func(i int, key string, def any) any {
		if i < len(args) {
			return args[i]
		}
		if v, ok := kwargs[key]; ok {
			return v
		}
		return def
	}
	switch x := norm(recv).(type) {
	case map[string]any:
		switch name {
		case "get":
			if len(args) == 0 {
				return nil, errors.New("get() needs a key")
			}
			k, ok := norm(args[0]).(string)
			if !ok {
				return arg(1, "default", nil), nil
			}
			if v, ok := x[k]; ok {
				return norm(v), nil
			}
			return arg(1, "default", nil), nil
		case "keys":
			return keysOf(x), nil
		case "values":
			return valuesOf(x), nil
		case "items":
			return itemsOf(x), nil
		}
	case string:
		switch name {
		case "lower":
			return strings.ToLower(x), nil
		case "upper":
			return strings.ToUpper(x), nil
		case "strip", "lstrip", "rstrip":
			return stripString(name, x, arg(0, "chars", nil))
		case "split":
			return splitString(x, arg(0, "sep", nil), arg(1, "maxsplit", int64(-1)))
		case "startswith", "endswith":
			return affix(name, x, arg(0, "prefix", nil))
		case "replace":
			return replaceString(x, arg(0, "old", nil), arg(1, "new", nil), arg(2, "count", int64(-1)))
		case "title":
			return titleString(x), nil
		case "capitalize":
			return capitalizeString(x), nil
		case "join":
			l, ok := norm(arg(0, "iterable", nil)).([]any)
			if !ok {
				return nil, errors.New("join() needs a list")
			}
			return joinList(l, x)
		case "format":
			return nil, errors.New("str.format is not supported; use ~ or the format filter")
		}
	case []any:
		switch name {
		case "index":
			for i, e := range x {
				if equal(e, arg(0, "value", nil)) {
					return int64(i), nil
				}
			}
			return nil, errors.New("list.index(x): x not in list")
		case "count":
			var n int64
			for _, e := range x {
				if equal(e, arg(0, "value", nil)) {
					n++
				}
			}
			return n, nil
		}
	case undef:
		if x.name != "" {
			return nil, fmt.Errorf("%q is undefined (calling .%s())", x.name, name)
		}
		return nil, fmt.Errorf("undefined value has no method %s()", name)
	}
	return nil, fmt.Errorf("'%s' object has no method %q", TypeName(recv), name)
}

func stripString(kind, s string, chars any) (any, error) {
	cut := " \t\n\r\v\f"
	if chars != nil && !isUndef(chars) {
		c, ok := norm(chars).(string)
		if !ok {
			return nil, fmt.Errorf("%s arg must be a string", kind)
		}
		cut = c
	}
	switch kind {
	case "lstrip":
		return strings.TrimLeft(s, cut), nil
	case "rstrip":
		return strings.TrimRight(s, cut), nil
	}
	return strings.Trim(s, cut), nil
}

func splitString(s string, sep, maxsplit any) (any, error) {
	n, ok := norm(maxsplit).(int64)
	if !ok {
		return nil, errors.New("split maxsplit must be an integer")
	}
	var parts []string
	if sep == nil || isUndef(sep) {
		fields := strings.Fields(s)
		if n >= 0 && int64(len(fields)) > n+1 {
			// Keep the remainder after n splits, as Python does.
			rest := s
			parts = nil
			for i := int64(0); i < n; i++ {
				rest = strings.TrimLeft(rest, " \t\n\r\v\f")
				j := strings.IndexAny(rest, " \t\n\r\v\f")
				parts = append(parts, rest[:j])
				rest = rest[j:]
			}
			parts = append(parts, strings.TrimLeft(rest, " \t\n\r\v\f"))
		} else {
			parts = fields
		}
	} else {
		sp, ok := norm(sep).(string)
		if !ok {
			return nil, errors.New("split separator must be a string")
		}
		if sp == "" {
			return nil, errors.New("empty separator")
		}
		if n < 0 {
			parts = strings.Split(s, sp)
		} else {
			parts = strings.SplitN(s, sp, int(min(n, MaxOutput))+1)
		}
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func affix(kind, s string, arg any) (any, error) {
	var cands []string
	switch a := norm(arg).(type) {
	case string:
		cands = []string{a}
	case []any:
		for _, e := range a {
			es, ok := norm(e).(string)
			if !ok {
				return nil, fmt.Errorf("%s arg must be a string or a tuple of strings", kind)
			}
			cands = append(cands, es)
		}
	default:
		return nil, fmt.Errorf("%s arg must be a string or a tuple of strings", kind)
	}
	for _, c := range cands {
		if (kind == "startswith" && strings.HasPrefix(s, c)) || (kind == "endswith" && strings.HasSuffix(s, c)) {
			return true, nil
		}
	}
	return false, nil
}

func replaceString(s string, old, new, count any) (any, error) {
	o, ok1 := norm(old).(string)
	nw, ok2 := norm(new).(string)
	c, ok3 := norm(count).(int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, errors.New("replace needs (old: str, new: str[, count: int])")
	}
	if c < 0 {
		c = -1
	}
	// Bound the result before building it.
	n := int64(strings.Count(s, o))
	if o == "" {
		n = int64(utf8.RuneCountInString(s)) + 1
	}
	if c >= 0 && c < n {
		n = c
	}
	if int64(len(s))+n*int64(len(nw)) > MaxOutput {
		return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
	}
	return strings.Replace(s, o, nw, int(c)), nil
}

func titleString(s string) string {
	var b strings.Builder
	prevLetter := false
	for _, r := range s {
		isLetter := strings.ToUpper(string(r)) != strings.ToLower(string(r))
		if isLetter && !prevLetter {
			b.WriteString(strings.ToUpper(string(r)))
		} else if isLetter {
			b.WriteString(strings.ToLower(string(r)))
		} else {
			b.WriteRune(r)
		}
		prevLetter = isLetter
	}
	return b.String()
}

func capitalizeString(s string) string {
	if s == "" {
		return s
	}
	r, size := utf8.DecodeRuneInString(s)
	return strings.ToUpper(string(r)) + strings.ToLower(s[size:])
}

func joinList(l []any, sep string) (any, error) {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(toString(e))
		if b.Len() > MaxOutput {
			return nil, fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
		}
	}
	return b.String(), nil
}

func keysOf(m map[string]any) []any {
	keys := sortedKeys(m)
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

func valuesOf(m map[string]any) []any {
	keys := sortedKeys(m)
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

func itemsOf(m map[string]any) []any {
	keys := sortedKeys(m)
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = []any{k, m[k]}
	}
	return out
}
