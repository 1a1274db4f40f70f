package tools

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/noetl/noetl/internal/playbook"
	"github.com/stretchr/testify/require"
)

// toolRuns names, for each kind a worker runs, the package directory and the type whose
// Run method implements it (the tool table in services/worker/worker.go and
// systools.Register).
var toolRuns = map[string]struct{ dir, recv string }{
	"artifact":        {".", "Artifact"},
	"duckdb":          {".", "DuckDB"},
	"http":            {".", "HTTP"},
	"nats":            {".", "NATS"},
	"noop":            {".", "Noop"},
	"playbook":        {".", "Playbook"},
	"postgres":        {".", "Postgres"},
	"python":          {".", "Python"},
	"secrets":         {".", "Secrets"},
	"shell":           {".", "Shell"},
	"system_info":     {".", "SystemInfo"},
	"wasm":            {"../wasm", "Tool"},
	"system_cleanup":  {"../systools", "cleanup"},
	"system_purge":    {"../systools", "purge"},
	"system_sql_read": {"../systools", "sqlRead"},
}

// TestToolsReadOnlyListedKeys keeps playbook.ToolKeys honest: it reads the source of each
// tool's Run method, follows its configuration (Call.Config and every map or *Call it is
// passed on as) through the functions of the tool's package, and collects every key read
// from it. Each key a tool reads must be in its kind's list (else registration would warn
// that a key the tool reads is ignored), and each key of the list must be read by the tool
// or by the engine around it (else a key the engine ignores would register silently). A
// read the test cannot follow (a key that is not a constant, the configuration ranged over
// or handed to another package) fails it, so a new way of reading keys cannot slip past.
func TestToolsReadOnlyListedKeys(t *testing.T) {
	kinds := slices.Sorted(maps.Keys(toolRuns))
	require.ElementsMatch(t, slices.Concat(playbook.WorkerToolKinds, playbook.SystemToolKinds), kinds,
		"every kind a worker runs has a row in toolRuns")
	pkgs := map[string]*srcPkg{}
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			run := toolRuns[kind]
			p := pkgs[run.dir]
			if p == nil {
				p = loadSrc(t, run.dir)
				pkgs[run.dir] = p
			}
			read, err := p.configReads(run.recv)
			require.NoError(t, err)
			known := playbook.ToolKeys(kind)
			for _, k := range slices.Sorted(maps.Keys(read)) {
				if k == playbook.SQLLiteralDigestsKey {
					continue // set by Parse, never by a playbook
				}
				require.Contains(t, known, k, "tool %q reads key %q (%s), which playbook.ToolKeys(%q) does not list", kind, k, read[k], kind)
			}
			for _, k := range known {
				if slices.Contains(playbook.CommonToolKeys, k) || slices.Contains(engineReadKeys[kind], k) {
					continue
				}
				require.Contains(t, read, k, "playbook.ToolKeys(%q) lists %q, which the tool does not read", kind, k)
			}
		})
	}
}

// engineReadKeys are keys of a kind's list the engine reads outside the worker's tool
// (none yet beyond CommonToolKeys).
var engineReadKeys = map[string][]string{}

// srcPkg is the parsed source of one package (tests excluded, every build tag included).
type srcPkg struct {
	fset  *token.FileSet
	funcs map[string][]*ast.FuncDecl // by name; methods and functions alike
}

func loadSrc(t *testing.T, dir string) *srcPkg {
	t.Helper()
	p := &srcPkg{fset: token.NewFileSet(), funcs: map[string][]*ast.FuncDecl{}}
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(p.fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				p.funcs[fd.Name.Name] = append(p.funcs[fd.Name.Name], fd)
			}
		}
	}
	return p
}

func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	e := fd.Recv.List[0].Type
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// taint is what a function receives of the configuration: the names of its parameters
// that hold the *Call and those that hold the configuration map.
type taint struct{ call, cfg []string }

// analysis follows the configuration through one package.
type analysis struct {
	*srcPkg
	read map[string]string          // key -> where it is read
	done map[string]map[string]bool // function+taint -> its parameters used as keys
}

// configReads returns the keys the Run method of recv reads from Call.Config, each with
// the place it is read.
func (p *srcPkg) configReads(recv string) (map[string]string, error) {
	a := &analysis{srcPkg: p, read: map[string]string{}, done: map[string]map[string]bool{}}
	found := false
	for _, fd := range p.funcs["Run"] {
		if recvName(fd) != recv {
			continue
		}
		found = true
		params := fd.Type.Params.List
		last := params[len(params)-1]
		name := "_"
		if len(last.Names) > 0 {
			name = last.Names[0].Name
		}
		if _, err := a.scan(fd, taint{call: []string{name}}); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("no method Run of %s", recv)
	}
	return a.read, nil
}

func paramNames(fd *ast.FuncDecl) []string {
	var names []string
	for _, f := range fd.Type.Params.List {
		if len(f.Names) == 0 {
			names = append(names, "_")
		}
		for _, pn := range f.Names {
			names = append(names, pn.Name)
		}
	}
	return names
}

// scan collects the configuration keys fd reads and returns its parameters that name
// keys (cfgString(m, keys...)): its callers' arguments for them are keys too.
func (a *analysis) scan(fd *ast.FuncDecl, in taint) (map[string]bool, error) {
	id := fmt.Sprintf("%p %v", fd, in)
	if kp, ok := a.done[id]; ok {
		return kp, nil
	}
	keyParams := map[string]bool{}
	a.done[id] = keyParams // a recursive call sees the keys found so far
	calls := slices.Clone(in.call)
	cfgs := slices.Clone(in.cfg)
	params := map[string]string{} // name -> the parameter it is (itself, or a loop over it)
	for _, n := range paramNames(fd) {
		params[n] = n
	}
	isCall := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && slices.Contains(calls, id.Name)
	}
	isCfg := func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			return slices.Contains(cfgs, e.Name)
		case *ast.SelectorExpr:
			return e.Sel.Name == "Config" && isCall(e.X)
		}
		return false
	}
	// Names bound in the function: aliases of the configuration, loop variables over
	// lists of literal strings, closures and their parameters.
	lits := map[string][]string{}
	closureOf := map[string]string{}
	callsTo := map[string][]*ast.CallExpr{}
	var strs func(e ast.Expr) ([]string, bool)
	strs = func(e ast.Expr) ([]string, bool) {
		cl, ok := e.(*ast.CompositeLit)
		if !ok {
			return nil, false
		}
		var out []string
		for _, el := range cl.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				el = kv.Value // a map of key lists: its values
			}
			if bl, ok := el.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				s, _ := strconv.Unquote(bl.Value)
				out = append(out, s)
				continue
			}
			ss, ok := strs(el)
			if !ok {
				return nil, false
			}
			out = append(out, ss...)
		}
		return out, true
	}
	for changed := true; changed; {
		changed = false
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for i, r := range n.Rhs {
					if i >= len(n.Lhs) {
						break
					}
					id, ok := n.Lhs[i].(*ast.Ident)
					if !ok {
						continue
					}
					if isCfg(r) && !slices.Contains(cfgs, id.Name) {
						cfgs, changed = append(cfgs, id.Name), true
					}
					if fl, ok := r.(*ast.FuncLit); ok {
						for _, f := range fl.Type.Params.List {
							for _, pn := range f.Names {
								closureOf[pn.Name] = id.Name
							}
						}
					}
				}
			case *ast.RangeStmt:
				id, ok := n.Value.(*ast.Ident)
				if !ok {
					return true
				}
				if ss, ok := strs(n.X); ok {
					lits[id.Name] = ss
				}
				if x, ok := n.X.(*ast.Ident); ok && params[x.Name] != "" {
					params[id.Name] = params[x.Name] // a loop over keys the callers pass
				}
				if cl, ok := n.X.(*ast.CompositeLit); ok && slices.ContainsFunc(cl.Elts, isCfg) && !slices.Contains(cfgs, id.Name) {
					cfgs, changed = append(cfgs, id.Name), true
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok {
					callsTo[id.Name] = append(callsTo[id.Name], n)
				}
			}
			return true
		})
	}
	at := func(n ast.Node) string { return a.fset.Position(n.Pos()).String() }
	// keys resolves the key of a read: a literal, a loop variable over literals, a
	// parameter of a closure (the literals its calls pass), the engine's own key, or a
	// parameter of the function (its callers pass the keys).
	keys := func(e ast.Expr) ([]string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				s, _ := strconv.Unquote(e.Value)
				return []string{s}, true
			}
		case *ast.Ident:
			if ss, ok := lits[e.Name]; ok {
				return ss, true
			}
			if fn, ok := closureOf[e.Name]; ok {
				var out []string
				for _, c := range callsTo[fn] {
					for _, arg := range c.Args {
						if bl, ok := arg.(*ast.BasicLit); ok && bl.Kind == token.STRING {
							s, _ := strconv.Unquote(bl.Value)
							out = append(out, s)
						}
					}
				}
				return out, len(out) > 0
			}
			if p := params[e.Name]; p != "" {
				keyParams[p] = true
				return nil, true
			}
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok && x.Name == "playbook" && e.Sel.Name == "SQLLiteralDigestsKey" {
				return []string{playbook.SQLLiteralDigestsKey}, true
			}
		}
		return nil, false
	}
	var bad error
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if bad != nil {
			return false
		}
		switch n := n.(type) {
		case *ast.IndexExpr:
			if !isCfg(n.X) {
				return true
			}
			ks, ok := keys(n.Index)
			if !ok {
				bad = fmt.Errorf("%s: a configuration read whose key the test cannot see", at(n))
			}
			for _, k := range ks {
				a.read[k] = at(n)
			}
		case *ast.RangeStmt:
			if isCfg(n.X) {
				bad = fmt.Errorf("%s: ranges over the configuration (every key would be read)", at(n))
			}
		case *ast.CallExpr:
			passed := map[int]bool{}
			for i, arg := range n.Args {
				if isCfg(arg) || isCall(arg) {
					passed[i] = true
				}
			}
			if len(passed) == 0 {
				return true
			}
			var name string
			switch f := n.Fun.(type) {
			case *ast.Ident:
				name = f.Name
			case *ast.SelectorExpr:
				name = f.Sel.Name
			}
			targets := a.funcs[name]
			if len(targets) == 0 {
				bad = fmt.Errorf("%s: the configuration is handed to %s, which the test cannot follow", at(n), name)
				return false
			}
			for _, target := range targets {
				names := paramNames(target)
				var t taint
				for i, arg := range n.Args {
					if !passed[i] || i >= len(names) {
						continue
					}
					if isCfg(arg) {
						t.cfg = append(t.cfg, names[i])
					} else {
						t.call = append(t.call, names[i])
					}
				}
				kp, err := a.scan(target, t)
				if err != nil {
					bad = err
					return false
				}
				// The arguments for the callee's key parameters are keys (a variadic one
				// takes the rest of the arguments).
				for i, arg := range n.Args {
					pi := min(i, len(names)-1)
					if !kp[names[pi]] {
						continue
					}
					ks, ok := keys(arg)
					if !ok {
						bad = fmt.Errorf("%s: a key passed to %s that the test cannot see", at(arg), name)
						return false
					}
					for _, k := range ks {
						a.read[k] = at(arg)
					}
				}
			}
		}
		return true
	})
	return keyParams, bad
}
