package template

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/nodes"
)

// Names returns the top-level identifiers referenced by the templates inside
// v (strings, and the keys and values of maps and lists, recursively), sorted
// and unique: {{ fetch.data.x }} yields "fetch". Names bound inside the
// template (for-loop variables, loop, set targets) and function names are
// left out. Strings that are not valid templates contribute nothing.
func Names(v any) []string {
	names, _ := NameRefs(v)
	return names
}

// namesCache remembers the names of template sources seen by Parse, since
// playbooks repeat the same templates often.
var namesCache sync.Map // string -> []string (nil entry: not analysable)

const maxNamesCache = 8192

var namesCacheLen struct {
	sync.Mutex
	n int
}

// NameRefs is Names plus whether some template could not be analysed.
func NameRefs(v any) ([]string, bool) {
	set := map[string]bool{}
	dynamic := false
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if depth > maxRenderDepth {
			dynamic = true
			return
		}
		switch x := v.(type) {
		case string:
			if !IsTemplate(x) {
				return
			}
			ns, ok := sourceNames(x)
			if !ok {
				dynamic = true
				return
			}
			for _, n := range ns {
				set[n] = true
			}
		case map[string]any:
			for k, e := range x {
				walk(k, depth+1)
				walk(e, depth+1)
			}
		case []any:
			for _, e := range x {
				walk(e, depth+1)
			}
		}
	}
	walk(v, 0)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, dynamic
}

// ExprNames is NameRefs of an expression as Eval and Truthy evaluate it (written bare or
// in {{ }}): the top-level names it reads, and whether it could not be analysed.
func ExprNames(expr string) ([]string, bool) {
	return NameRefs(exprSource(expr))
}

// FirstCompileError returns the compile error of the first template inside v (strings,
// and the keys and values of maps and lists) that does not compile, or nil.
func FirstCompileError(v any) error {
	switch x := v.(type) {
	case string:
		if IsTemplate(x) {
			return compileTemplate(x).err
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := FirstCompileError(k); err != nil {
				return err
			}
			if err := FirstCompileError(x[k]); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := FirstCompileError(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func sourceNames(src string) ([]string, bool) {
	if v, ok := namesCache.Load(src); ok {
		ns := v.([]string)
		return ns, ns != nil
	}
	c := compileTemplate(src)
	var ns []string
	if c.err == nil {
		ns = freeNames(c.root)
	}
	if len(src) <= maxCachedSource {
		namesCacheLen.Lock()
		if namesCacheLen.n >= maxNamesCache {
			namesCache.Clear()
			namesCacheLen.n = 0
		}
		namesCacheLen.n++
		namesCacheLen.Unlock()
		namesCache.Store(src, ns)
	}
	return ns, c.err == nil
}

// freeNames returns the free variables of a parsed template.
func freeNames(root *nodes.Template) []string {
	w := &nameWalker{free: map[string]bool{}, kc: map[string]bool{}}
	w.nodes(root.Nodes, &bindScope{names: map[string]bool{}})
	out := make([]string, 0, len(w.free))
	for n := range w.free {
		out = append(out, n)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

type bindScope struct {
	names  map[string]bool
	parent *bindScope
}

func (s *bindScope) bound(name string) bool {
	for ; s != nil; s = s.parent {
		if s.names[name] {
			return true
		}
	}
	return false
}

type nameWalker struct {
	free map[string]bool
	// kc collects the keychain entries named as keychain.<name> or keychain["<name>"];
	// kcAll is set by any other use of keychain (keychain[x], keychain alone).
	kc    map[string]bool
	kcAll bool
}

// keychainEntry returns the entry name n reads from the unbound keychain variable
// (keychain.<name>, keychain["<name>"]), or "".
func keychainEntry(n nodes.Node, sc *bindScope) string {
	var base nodes.Node
	name := ""
	switch x := n.(type) {
	case *nodes.GetAttribute:
		base, name = x.Node, x.Attribute
	case *nodes.GetItem:
		if s, ok := x.Arg.(*nodes.String); ok {
			base, name = x.Node, s.Val
		}
	}
	if b, ok := base.(*nodes.Name); ok && b.Name.Val == "keychain" && !sc.bound("keychain") {
		return name
	}
	return ""
}

func (w *nameWalker) nodes(ns []nodes.Node, sc *bindScope) {
	for _, n := range ns {
		switch x := n.(type) {
		case *nodes.Output:
			w.expr(x.Expression, sc)
			w.expr(x.Condition, sc)
			w.expr(x.Alternative, sc)
		case *nodes.ControlStructureBlock:
			switch cs := x.ControlStructure.(type) {
			case *controlStructures.IfControlStructure:
				for _, c := range cs.Conditions {
					w.expr(c, sc)
				}
				for _, wr := range cs.Wrappers {
					w.nodes(wr.Nodes, sc)
				}
			case *controlStructures.ForControlStructure:
				w.expr(cs.ObjectEvaluator, sc)
				inner := &bindScope{names: map[string]bool{cs.Key: true, "loop": true}, parent: sc}
				if cs.Value != "" {
					inner.names[cs.Value] = true
				}
				w.expr(cs.IfCondition, inner)
				w.nodes(cs.BodyWrapper.Nodes, inner)
				if cs.EmptyWrapper != nil {
					w.nodes(cs.EmptyWrapper.Nodes, sc)
				}
			case *setStmt:
				w.expr(cs.expr, sc)
				w.expr(cs.cond, sc)
				w.expr(cs.alt, sc)
				if cs.body != nil {
					w.nodes(cs.body.Nodes, sc)
				}
				switch t := cs.target.(type) {
				case *nodes.Name:
					sc.names[t.Name.Val] = true
				case *nodes.GetAttribute:
					w.expr(t.Node, sc)
				}
			}
		}
	}
}

func (w *nameWalker) expr(n nodes.Node, sc *bindScope) {
	switch x := n.(type) {
	case nil:
	case *nodes.Name:
		if !sc.bound(x.Name.Val) {
			w.free[x.Name.Val] = true
			w.kcAll = w.kcAll || x.Name.Val == "keychain"
		}
	case *nodes.List:
		for _, e := range x.Val {
			w.expr(e, sc)
		}
	case *nodes.Tuple:
		for _, e := range x.Val {
			w.expr(e, sc)
		}
	case *nodes.Dict:
		for _, p := range x.Pairs {
			w.expr(p.Key, sc)
			w.expr(p.Value, sc)
		}
	case *nodes.Pair:
		w.expr(x.Key, sc)
		w.expr(x.Value, sc)
	case *nodes.GetAttribute:
		if e := keychainEntry(x, sc); e != "" {
			w.free["keychain"], w.kc[e] = true, true
			return
		}
		w.expr(x.Node, sc)
	case *nodes.GetItem:
		if e := keychainEntry(x, sc); e != "" {
			w.free["keychain"], w.kc[e] = true, true
			return
		}
		w.expr(x.Node, sc)
		w.expr(x.Arg, sc)
	case *nodes.GetSlice:
		w.expr(x.Node, sc)
		w.expr(x.Start, sc)
		w.expr(x.End, sc)
		w.expr(x.Step, sc)
	case *nodes.Call:
		if name, ok := x.Func.(*nodes.Name); !ok || globals[name.Name.Val] == nil || sc.bound(name.Name.Val) {
			w.expr(x.Func, sc)
		}
		for _, a := range x.Args {
			w.expr(a, sc)
		}
		for _, a := range x.Kwargs {
			w.expr(a, sc)
		}
	case *nodes.Negation:
		w.expr(x.Term, sc)
	case *nodes.UnaryExpression:
		w.expr(x.Term, sc)
	case *nodes.BinaryExpression:
		w.expr(x.Left, sc)
		w.expr(x.Right, sc)
	case *nodes.FilteredExpression:
		w.expr(x.Expression, sc)
		for _, f := range x.Filters {
			for _, a := range f.Args {
				w.expr(a, sc)
			}
			for _, a := range f.Kwargs {
				w.expr(a, sc)
			}
		}
	case *nodes.TestExpression:
		w.expr(x.Expression, sc)
		for _, a := range x.Test.Args {
			w.expr(a, sc)
		}
		for _, a := range x.Test.Kwargs {
			w.expr(a, sc)
		}
	}
}

// checkNames rejects templates that use unknown filters or tests, or reach for
// interpreter internals (forbiddenAttr), so the mistake surfaces at compile
// time even in branches that never run.
func checkNames(root *nodes.Template) error {
	var errs []string
	var visit func(n nodes.Node)
	visitNodes := func(ns []nodes.Node) {
		for _, n := range ns {
			visit(n)
		}
	}
	visit = func(n nodes.Node) {
		switch x := n.(type) {
		case nil:
		case *nodes.Output:
			visit(x.Expression)
			visit(x.Condition)
			visit(x.Alternative)
		case *nodes.ControlStructureBlock:
			switch cs := x.ControlStructure.(type) {
			case *controlStructures.IfControlStructure:
				for _, c := range cs.Conditions {
					visit(c)
				}
				for _, wr := range cs.Wrappers {
					visitNodes(wr.Nodes)
				}
			case *controlStructures.ForControlStructure:
				visit(cs.ObjectEvaluator)
				visit(cs.IfCondition)
				visitNodes(cs.BodyWrapper.Nodes)
				if cs.EmptyWrapper != nil {
					visitNodes(cs.EmptyWrapper.Nodes)
				}
			case *setStmt:
				visit(cs.target)
				visit(cs.expr)
				visit(cs.cond)
				visit(cs.alt)
				if cs.body != nil {
					visitNodes(cs.body.Nodes)
				}
			}
		case *nodes.List:
			for _, e := range x.Val {
				visit(e)
			}
		case *nodes.Tuple:
			for _, e := range x.Val {
				visit(e)
			}
		case *nodes.Dict:
			for _, p := range x.Pairs {
				visit(p.Key)
				visit(p.Value)
			}
		case *nodes.GetAttribute:
			if err := forbiddenAttr(x.Attribute); err != nil {
				errs = append(errs, err.Error())
			}
			visit(x.Node)
		case *nodes.GetItem:
			if k, ok := x.Arg.(*nodes.String); ok {
				if err := forbiddenAttr(k.Val); err != nil {
					errs = append(errs, err.Error())
				}
			}
			visit(x.Node)
			visit(x.Arg)
		case *nodes.GetSlice:
			visit(x.Node)
			visit(x.Start)
			visit(x.End)
			visit(x.Step)
		case *nodes.Call:
			visit(x.Func)
			for _, a := range x.Args {
				visit(a)
			}
			for _, a := range x.Kwargs {
				visit(a)
			}
		case *nodes.Negation:
			visit(x.Term)
		case *nodes.UnaryExpression:
			visit(x.Term)
		case *nodes.BinaryExpression:
			visit(x.Left)
			visit(x.Right)
		case *nodes.FilteredExpression:
			visit(x.Expression)
			for _, f := range x.Filters {
				if filters[f.Name] == nil {
					errs = append(errs, fmt.Sprintf("unknown filter %q", f.Name))
				}
				for _, a := range f.Args {
					visit(a)
				}
				for _, a := range f.Kwargs {
					visit(a)
				}
			}
		case *nodes.TestExpression:
			visit(x.Expression)
			if tests[x.Test.Name] == nil {
				errs = append(errs, fmt.Sprintf("unknown test %q", x.Test.Name))
			}
			for _, a := range x.Test.Args {
				visit(a)
			}
		case *nodes.Error:
			errs = append(errs, x.Error.Error())
		}
	}
	visitNodes(root.Nodes)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// KeychainRefs returns the keychain entries the templates inside v reference as
// keychain.<name> (or keychain["<name>"]), sorted and unique, and whether some template
// uses keychain in another way (keychain[expr], keychain alone), which may reach any
// entry. Templates that do not compile contribute nothing.
func KeychainRefs(v any) (names []string, all bool) {
	set := map[string]bool{}
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if depth > maxRenderDepth {
			return
		}
		switch x := v.(type) {
		case string:
			if !IsTemplate(x) || !strings.Contains(x, "keychain") {
				return
			}
			c := compileTemplate(x)
			if c.err != nil {
				return
			}
			w := &nameWalker{free: map[string]bool{}, kc: map[string]bool{}}
			w.nodes(c.root.Nodes, &bindScope{names: map[string]bool{}})
			for n := range w.kc {
				set[n] = true
			}
			all = all || w.kcAll
		case map[string]any:
			for k, e := range x {
				walk(k, depth+1)
				walk(e, depth+1)
			}
		case []any:
			for _, e := range x {
				walk(e, depth+1)
			}
		}
	}
	walk(v, 0)
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, all
}
