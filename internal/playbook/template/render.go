package template

import (
	"container/list"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// Template limits applied by Renderer.
const (
	// MaxOutput is the most bytes one Render or Eval call may produce (the
	// sum over every string it renders), and the longest string or list an
	// expression may build.
	MaxOutput = 1 << 20
	// MaxRenderTime is the longest one Render or Eval call may run.
	MaxRenderTime = time.Second
	// cacheEntries bounds the number of compiled templates kept.
	cacheEntries = 4096
	// cacheBytes bounds the total source size of compiled templates kept.
	cacheBytes = 16 << 20
	// maxCachedSource is the longest template source that is cached.
	maxCachedSource = 64 << 10
)

// ErrOutputLimit is returned (wrapped) when rendering would produce more
// than MaxOutput bytes.
var ErrOutputLimit = errors.New("template output exceeds the limit")

// ErrTimeLimit is returned (wrapped) when rendering runs longer than
// MaxRenderTime.
var ErrTimeLimit = errors.New("template evaluation exceeds the time limit")

// TemplateError is a failure to compile or evaluate a template: a syntax
// error, an unknown filter or test, a type error, or a limit.
type TemplateError struct {
	// Template is the template source (shortened when long).
	Template string
	// Line is the 1-based line inside the template, 0 when unknown.
	Line int
	// Msg says what is wrong.
	Msg string

	err error
}

// Error formats the error with the template it is about.
func (e *TemplateError) Error() string {
	if e.Line > 1 {
		return fmt.Sprintf("template %q: line %d: %s", e.Template, e.Line, e.Msg)
	}
	return fmt.Sprintf("template %q: %s", e.Template, e.Msg)
}

// Unwrap returns the underlying cause (ErrOutputLimit, ErrTimeLimit), if any.
func (e *TemplateError) Unwrap() error { return e.err }

// Shorten cuts s to at most 120 bytes (at a rune boundary) followed by "...", for
// quoting a template or a value in a message.
func Shorten(s string) string {
	const max = 120
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Renderer renders Jinja2 templates with NoETL semantics. It is safe for
// concurrent use and caches compiled templates by source.
type Renderer struct {
	timeLimit time.Duration

	mu    sync.Mutex
	lru   *list.List // of *cacheEntry, most recent first
	byKey map[string]*list.Element
	bytes int
}

type cacheEntry struct {
	src string
	tpl *compiled
}

// compiled is a parsed template.
type compiled struct {
	root   *nodes.Template
	single *nodes.Output // set when the template is exactly one {{ expr }}
	err    error
}

// NewRenderer returns a Renderer with an empty cache.
func NewRenderer() *Renderer {
	return &Renderer{timeLimit: MaxRenderTime, lru: list.New(), byKey: map[string]*list.Element{}}
}

// Render renders every template inside v: maps (keys too) and lists are
// rendered recursively into new values (v is not modified); a string without
// "{{" or "{%" is returned as is; a string that is exactly one {{ expr }}
// (after trimming spaces) yields the typed, JSON-like value of the
// expression (undefined yields nil); any other string renders to a string.
// Everything one call produces, typed values included, counts against
// MaxOutput, and the call stops with an error after MaxRenderTime.
func (r *Renderer) Render(v any, ctx map[string]any) (any, error) {
	out, err := r.render(r.newState(ctx), v, 0)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Eval evaluates one expression, written bare or wrapped in {{ }}, and
// returns its typed value (undefined yields nil).
func (r *Renderer) Eval(expr string, ctx map[string]any) (any, error) {
	v, err := r.eval(r.newState(ctx), expr)
	if err != nil {
		return nil, err
	}
	return export(v), nil
}

// Truthy evaluates expr like Eval and returns its Jinja truthiness.
// Undefined values are false; evaluation errors are returned, never
// reported as false. The caller decides what an empty expression means.
func (r *Renderer) Truthy(expr string, ctx map[string]any) (bool, error) {
	v, err := r.eval(r.newState(ctx), expr)
	if err != nil {
		return false, err
	}
	return truthy(v), nil
}

// exprSource is the template source of an expression Eval and Truthy evaluate: written
// bare or wrapped in {{ }}.
func exprSource(expr string) string {
	src := strings.TrimSpace(expr)
	if !strings.HasPrefix(src, "{{") || !strings.HasSuffix(src, "}}") {
		src = "{{ " + src + " }}"
	}
	return src
}

func (r *Renderer) eval(st *state, expr string) (any, error) {
	c := r.compile(exprSource(expr))
	if c.err != nil {
		return nil, c.err
	}
	if c.single == nil {
		return nil, &TemplateError{Template: Shorten(expr), Msg: "not a single expression"}
	}
	v, err := st.output(c.single)
	if err != nil {
		return nil, wrapErr(expr, err)
	}
	return v, nil
}

const maxRenderDepth = 128

func (r *Renderer) render(st *state, v any, depth int) (any, error) {
	if depth > maxRenderDepth {
		return nil, &TemplateError{Msg: fmt.Sprintf("value nesting deeper than %d levels", maxRenderDepth)}
	}
	switch x := v.(type) {
	case string:
		return r.renderString(st, x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			rk := k
			if IsTemplate(k) {
				kv, err := r.renderText(st, k)
				if err != nil {
					return nil, err
				}
				rk = kv
			}
			re, err := r.render(st, e, depth+1)
			if err != nil {
				return nil, err
			}
			out[rk] = re
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			re, err := r.render(st, e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = re
		}
		return out, nil
	}
	return v, nil
}

// isLookup reports whether e only reads the context: a name, an attribute or an item.
func isLookup(e nodes.Expression) bool {
	switch x := e.(type) {
	case *nodes.Name:
		return true
	case *nodes.GetAttribute:
		return isLookup(x.Node)
	case *nodes.GetItem:
		return isLookup(x.Node)
	}
	return false
}

// IsTemplate reports whether s holds template syntax ({{ or {%): other strings render
// as themselves.
func IsTemplate(s string) bool {
	return strings.Contains(s, "{{") || strings.Contains(s, "{%")
}

// HasTemplates reports whether a string inside v (a map's keys and values, a list's items,
// recursively) holds template syntax. Render reads nothing of its context for a value
// without any: it returns a copy of the value, or the nesting error of a value nested too
// deep, which HasTemplates counts as a template so that the caller renders it.
func HasTemplates(v any) bool { return hasTemplates(v, 0) }

func hasTemplates(v any, depth int) bool {
	if depth > maxRenderDepth {
		return true
	}
	switch x := v.(type) {
	case string:
		return IsTemplate(x)
	case map[string]any:
		for k, e := range x {
			if IsTemplate(k) || hasTemplates(e, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasTemplates(e, depth+1) {
				return true
			}
		}
	}
	return false
}

func (r *Renderer) renderString(st *state, s string) (any, error) {
	if !IsTemplate(s) {
		return s, nil
	}
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{{") && strings.HasSuffix(t, "}}") {
		c := r.compile(t)
		if c.err == nil && c.single != nil {
			v, err := st.output(c.single)
			if err != nil {
				return nil, wrapErr(s, err)
			}
			v = export(v)
			// A lookup passes on a value the context already holds (a large result
			// loaded by reference, say) and builds nothing: only computed values are
			// charged to the output budget.
			if !isLookup(c.single.Expression) {
				if err := st.account(v); err != nil {
					return nil, wrapErr(s, err)
				}
			}
			return v, nil
		}
	}
	out, err := r.renderText(st, s)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// renderText renders s to a string.
func (r *Renderer) renderText(st *state, s string) (string, error) {
	c := r.compile(s)
	if c.err != nil {
		return "", c.err
	}
	var b strings.Builder
	w := &limitedWriter{b: &b, st: st}
	if err := st.renderNodes(c.root.Nodes, w); err != nil {
		return "", wrapErr(s, err)
	}
	return b.String(), nil
}

func wrapErr(src string, err error) error {
	var te *TemplateError
	if errors.As(err, &te) {
		return err
	}
	return &TemplateError{Template: Shorten(src), Msg: err.Error(), err: err}
}

// compile returns the cached compilation of src, compiling it on a miss.
func (r *Renderer) compile(src string) *compiled {
	r.mu.Lock()
	if el, ok := r.byKey[src]; ok {
		r.lru.MoveToFront(el)
		c := el.Value.(*cacheEntry).tpl
		r.mu.Unlock()
		return c
	}
	r.mu.Unlock()

	c := compileTemplate(src)
	if len(src) > maxCachedSource {
		return c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if el, ok := r.byKey[src]; ok { // compiled concurrently
		r.lru.MoveToFront(el)
		return el.Value.(*cacheEntry).tpl
	}
	r.byKey[src] = r.lru.PushFront(&cacheEntry{src: src, tpl: c})
	r.bytes += len(src)
	for r.lru.Len() > cacheEntries || r.bytes > cacheBytes {
		el := r.lru.Back()
		e := el.Value.(*cacheEntry)
		r.lru.Remove(el)
		delete(r.byKey, e.src)
		r.bytes -= len(e.src)
	}
	return c
}

// CacheLen reports how many compiled templates the Renderer holds.
func (r *Renderer) CacheLen() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lru.Len()
}

// controlStructureSet lists the control structures templates may use:
// no include, import, extends or macro, so a template can reach nothing
// but its context.
type controlStructureSet map[string]parser.ControlStructureParser

// Get returns the parser of the named control structure.
func (s controlStructureSet) Get(name string) (parser.ControlStructureParser, bool) {
	p, ok := s[name]
	return p, ok
}

var allowedControlStructures = func() controlStructureSet {
	set := controlStructureSet{"set": parseSet, "raw": parseRaw}
	for _, name := range []string{"if", "for"} {
		p, ok := controlStructures.All.Get(name)
		if !ok {
			panic("gonja has no " + name + " control structure")
		}
		set[name] = p
	}
	return set
}()

func compileTemplate(src string) (c *compiled) {
	c = &compiled{}
	fail := func(msg string, line int) *compiled {
		c.err = &TemplateError{Template: Shorten(src), Line: line, Msg: msg}
		return c
	}
	defer func() {
		if r := recover(); r != nil {
			c = fail(fmt.Sprintf("syntax error: %v", r), 0)
		}
	}()
	cfg := config.New()
	cfg.KeepTrailingNewline = true
	p := parser.NewParser("template", tokens.LexAll(src, cfg), cfg, nil, allowedControlStructures)
	root, err := p.Parse()
	if err != nil {
		line := 0
		var se *parser.SyntaxError
		if errors.As(err, &se) {
			line = se.Line
		}
		return fail("syntax error: "+err.Error(), line)
	}
	if p.Stream().IsError() {
		t := p.Stream().Current()
		return fail("syntax error: "+t.Val, t.Line)
	}
	if err := checkNames(root); err != nil {
		return fail(err.Error(), 0)
	}
	c.root = root
	if len(root.Nodes) == 1 {
		if out, ok := root.Nodes[0].(*nodes.Output); ok {
			c.single = out
		}
	}
	return c
}

// setStmt is {% set target = expr %} or {% set target %}...{% endset %}.
type setStmt struct {
	loc    *tokens.Token
	target nodes.Expression
	expr   nodes.Expression
	cond   nodes.Expression
	alt    nodes.Expression
	body   *nodes.Wrapper
}

// Position returns the set tag's first token.
func (s *setStmt) Position() *tokens.Token { return s.loc }

// String names the node.
func (s *setStmt) String() string { return "set" }

func parseSet(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	s := &setStmt{loc: args.Current()}
	target, err := args.ParseVariableOrLiteral()
	if err != nil {
		return nil, err
	}
	switch target.(type) {
	case *nodes.Name, *nodes.GetAttribute:
		s.target = target
	default:
		return nil, args.Error("set target must be a name or a namespace attribute", s.loc)
	}
	if args.Match(tokens.Assign) == nil {
		if !args.End() {
			return nil, args.Error("expected '=' or the end of the set tag", args.Current())
		}
		body, endArgs, err := p.WrapUntil("endset")
		if err != nil {
			return nil, err
		}
		if !endArgs.End() {
			return nil, endArgs.Error("endset takes no arguments", endArgs.Current())
		}
		s.body = body
		return s, nil
	}
	if s.expr, err = args.ParseExpression(); err != nil {
		return nil, err
	}
	if s.cond, s.alt, err = args.ParseCondition(); err != nil {
		return nil, err
	}
	if s.cond != nil && s.alt == nil {
		return nil, args.Error("set with if needs an else", args.Current())
	}
	if !args.End() {
		return nil, args.Error("malformed set tag", args.Current())
	}
	return s, nil
}

// rawStmt is {% raw %}...{% endraw %}.
type rawStmt struct {
	loc  *tokens.Token
	text string
}

// Position returns the raw tag's first token.
func (s *rawStmt) Position() *tokens.Token { return s.loc }

// String names the node.
func (s *rawStmt) String() string { return "raw" }

func parseRaw(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	s := &rawStmt{loc: p.Current()}
	if !args.End() {
		return nil, args.Error("raw takes no arguments", args.Current())
	}
	body, _, err := p.WrapUntil("endraw")
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	for _, n := range body.Nodes {
		d, ok := n.(*nodes.Data)
		if !ok {
			return nil, p.Error("raw may only contain text", n.Position())
		}
		b.WriteString(d.Data.Val)
	}
	s.text = b.String()
	return s, nil
}

// limitedWriter accumulates output within the state's output budget.
type limitedWriter struct {
	b  *strings.Builder
	st *state
}

// WriteString appends s, failing once the output budget is spent.
func (w *limitedWriter) WriteString(s string) error {
	w.st.outBytes += len(s)
	if w.st.outBytes > MaxOutput {
		return fmt.Errorf("%w (%d bytes)", ErrOutputLimit, MaxOutput)
	}
	w.b.WriteString(s)
	return nil
}
