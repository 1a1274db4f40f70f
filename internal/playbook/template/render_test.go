package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testCtx() map[string]any {
	return map[string]any{
		"a":        int64(2),
		"n":        3, // a Go int is accepted and becomes int64
		"whole":    float64(3),
		"half":     1.5,
		"s":        "Hello",
		"none":     nil,
		"flag":     true,
		"items":    []any{int64(3), int64(1), int64(2)},
		"users":    []any{map[string]any{"name": "Ann", "age": int64(30)}, map[string]any{"name": "bob", "age": int64(25)}},
		"m":        map[string]any{"k": "v", "n": int64(1)},
		"workload": map[string]any{"pages": []any{int64(1), int64(2)}, "api": "http://x"},
		"fetch":    map[string]any{"data": map[string]any{"x": "y"}, "status": "ok"},
		"num":      json.Number("42"),
		"strs":     []string{"p", "q"},
	}
}

func TestRenderTyped(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	cases := []struct {
		in   any
		want any
	}{
		// Strings without templates are returned as is.
		{"plain", "plain"},
		{"{ not a template }", "{ not a template }"},
		// A single expression keeps its type.
		{"{{ a }}", int64(2)},
		{"  {{ a }}  ", int64(2)},
		{"{{ n }}", int64(3)},
		{"{{ whole }}", float64(3)},
		{"{{ half }}", 1.5},
		{"{{ a + 1 }}", int64(3)},
		{"{{ n * 2 }}", int64(6)},
		{"{{ whole + 1 }}", float64(4)},
		{"{{ a / 2 }}", float64(1)},
		{"{{ 7 // 2 }}", int64(3)},
		{"{{ -7 // 2 }}", int64(-4)},
		{"{{ -7 % 3 }}", int64(2)},
		{"{{ 2 ** 10 }}", int64(1024)},
		{"{{ num + 1 }}", int64(43)},
		{"{{ flag }}", true},
		{"{{ not flag }}", false},
		{"{{ none }}", nil},
		{"{{ missing }}", nil},
		{"{{ items }}", []any{int64(3), int64(1), int64(2)}},
		{"{{ strs }}", []any{"p", "q"}},
		{"{{ m }}", map[string]any{"k": "v", "n": int64(1)}},
		{"{{ fetch.data }}", map[string]any{"x": "y"}},
		{"{{ {'a': [1, 2.5, none, true]} }}", map[string]any{"a": []any{int64(1), 2.5, nil, true}}},
		{"{{ 'x' ~ a }}", "x2"},
		{"{{ s if flag else 'no' }}", "Hello"},
		{"{{ s if none else 'no' }}", "no"},
		{"{{ s if none }}", nil},
		// Chainable undefined.
		{"{{ a.b.c | default(1) }}", int64(1)},
		{"{{ nope.b.c | default('d') }}", "d"},
		{"{{ none.x }}", nil},
		{"{{ users[9].name | default('none') }}", "none"},
		{"{{ event.name == 'loop.done' }}", false},
		{"{{ event.name != 'loop.done' }}", true},
		{"{{ x is defined }}", false},
		{"{{ a is defined }}", true},
		{"{{ x.y is undefined }}", true},
		{"{{ none is none }}", true},
		{"{{ none is not none }}", false},
		{"{{ x or 'fallback' }}", "fallback"},
		{"{{ x and x.y }}", nil},
		{"{{ 'k' in m }}", true},
		{"{{ 'z' in m }}", false},
		{"{{ 2 in items }}", true},
		{"{{ 9 not in items }}", true},
		{"{{ 'ell' in s }}", true},
		{"{{ 'a' in missing }}", false},
		{"{{ fetch.status == 'ok' and 429 in [429, 503] }}", true},
		{"{{ a == 2.0 }}", true},
		{"{{ [1, 2] == [1, 2] }}", true},
		{"{{ a > 1 and half < 2 }}", true},
		{"{{ 'abc' < 'abd' }}", true},
		// Filters.
		{"{{ m | tojson }}", `{"k":"v","n":1}`},
		{"{{ \"it's <b>\" | tojson }}", `"it\u0027s \u003cb\u003e"`},
		{"{{ '{\"a\": [1, 2.5]}' | fromjson }}", map[string]any{"a": []any{int64(1), 2.5}}},
		{"{{ 'hi' | b64encode }}", "aGk="},
		{"{{ 'aGk=' | b64decode }}", "hi"},
		{"{{ '12' | int }}", int64(12)},
		{"{{ '3.9' | int }}", int64(3)},
		{"{{ 'x' | int }}", int64(0)},
		{"{{ 'x' | int(7) }}", int64(7)},
		{"{{ half | int }}", int64(1)},
		{"{{ '2.5' | float }}", 2.5},
		{"{{ a | float }}", float64(2)},
		{"{{ a | string }}", "2"},
		{"{{ flag | string }}", "True"},
		{"{{ s | lower }}", "hello"},
		{"{{ s | upper }}", "HELLO"},
		{"{{ '  x ' | trim }}", "x"},
		{"{{ 'a,b,c' | split(',') }}", []any{"a", "b", "c"}},
		{"{{ 'a b  c' | split }}", []any{"a", "b", "c"}},
		{"{{ items | join('-') }}", "3-1-2"},
		{"{{ users | map(attribute='name') | join(', ') }}", "Ann, bob"},
		{"{{ items | first }}", int64(3)},
		{"{{ items | last }}", int64(2)},
		{"{{ s | first }}", "H"},
		{"{{ items | length }}", int64(3)},
		{"{{ s | length }}", int64(5)},
		{"{{ missing | length }}", int64(0)},
		{"{{ m | keys }}", []any{"k", "n"}},
		{"{{ m | values }}", []any{"v", int64(1)}},
		{"{{ m | items }}", []any{[]any{"k", "v"}, []any{"n", int64(1)}}},
		{"{{ items | sort }}", []any{int64(1), int64(2), int64(3)}},
		{"{{ items | sort(reverse=true) }}", []any{int64(3), int64(2), int64(1)}},
		{"{{ users | sort(attribute='age') | map(attribute='name') | list }}", []any{"bob", "Ann"}},
		{"{{ items | max }}", int64(3)},
		{"{{ items | min }}", int64(1)},
		{"{{ items | sum }}", int64(6)},
		{"{{ [1, 1, 2] | unique }}", []any{int64(1), int64(2)}},
		{"{{ items | reverse }}", []any{int64(2), int64(1), int64(3)}},
		{"{{ users | selectattr('age', 'gt', 26) | map(attribute='name') | first }}", "Ann"},
		{"{{ items | select('odd') | list }}", []any{int64(3), int64(1)}},
		{"{{ items | reject('odd') | list }}", []any{int64(2)}},
		{"{{ none | default('d') }}", "d"},
		{"{{ '' | default('d') }}", ""},
		{"{{ '' | default('d', true) }}", "d"},
		{"{{ -3 | abs }}", int64(3)},
		{"{{ 2.567 | round(2) }}", 2.57},
		{"{{ 'hello world' | title }}", "Hello World"},
		{"{{ 'a-b' | replace('-', '+') }}", "a+b"},
		{"{{ m | urlencode }}", "k=v&n=1"},
		// Methods and globals.
		{"{{ m.get('k') }}", "v"},
		{"{{ m.get('zz', 5) }}", int64(5)},
		{"{{ s.startswith('He') }}", true},
		{"{{ s.lower() }}", "hello"},
		{"{{ 'a:b'.split(':') }}", []any{"a", "b"}},
		{"{{ range(3) | list }}", []any{int64(0), int64(1), int64(2)}},
		{"{{ dict(a=1) }}", map[string]any{"a": int64(1)}},
		// Subscripts and slices.
		{"{{ items[0] }}", int64(3)},
		{"{{ items[-1] }}", int64(2)},
		{"{{ items[1:] }}", []any{int64(1), int64(2)}},
		{"{{ items[::-1] }}", []any{int64(2), int64(1), int64(3)}},
		{"{{ s[1:3] }}", "el"},
		{"{{ m['k'] }}", "v"},
		{"{{ workload.pages[1] }}", int64(2)},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			got, err := r.Render(tc.in, testCtx())
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRenderText(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	cases := []struct{ in, want string }{
		{"x={{ a }}", "x=2"},
		{"{{ a }}{{ a }}", "22"},
		{"{{ flag }} {{ not flag }} {{ none }} {{ missing }}|", "True False None |"},
		{"{{ half }} {{ whole }} {{ 1e20 }} {{ 0.0001 }}", "1.5 3.0 1e+20 0.0001"},
		{"m={{ m }}", "m={'k': 'v', 'n': 1}"},
		{"{{ items }} {{ strs }}", "[3, 1, 2] ['p', 'q']"},
		{"{{ users[0] }}!", "{'age': 30, 'name': 'Ann'}!"},
		{"{% for u in users %}{{ loop.index }}:{{ u.name }}{% if not loop.last %},{% endif %}{% endfor %}", "1:Ann,2:bob"},
		{"{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
		{"{% for x in items if x > 1 %}{{ x }}{% endfor %}", "32"},
		{"{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}", "k=v;n=1;"},
		{"{% for x in missing %}a{% endfor %}ok", "ok"},
		{"{% if a > 5 %}big{% elif a > 1 %}mid{% else %}small{% endif %}", "mid"},
		{"{% set x = a * 10 %}{{ x }}", "20"},
		{"{% set ns = namespace(c=0) %}{% for i in items %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}", "6"},
		{"{% set block %}in {{ s }}{% endset %}{{ block | upper }}", "IN HELLO"},
		{"{% raw %}{{ not rendered }}{% endraw %}", "{{ not rendered }}"},
		{"A\n  {%- if flag %}\n yes{% endif -%}\n  B", "A\n yesB"},
		{"{# comment #}{{ 'x' }}y", "xy"},
		{"SELECT '{{ s }}' WHERE id = {{ a }};\n", "SELECT 'Hello' WHERE id = 2;\n"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := r.Render(tc.in, testCtx())
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRenderRecursive(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	in := map[string]any{
		"count":       "{{ a }}",
		"{{ s }}_key": []any{"{{ flag }}", "lit", int64(5), nil, map[string]any{"deep": "v={{ a }}"}},
		"n":           1.5,
	}
	got, err := r.Render(in, testCtx())
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"count":     int64(2),
		"Hello_key": []any{true, "lit", int64(5), nil, map[string]any{"deep": "v=2"}},
		"n":         1.5,
	}, got)
	// The input is not modified.
	require.Equal(t, "{{ a }}", in["count"])
}

func TestRenderErrors(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	cases := []struct{ in, msg string }{
		{"{{ a + }}", "syntax error"},
		{"{{ a | nosuchfilter }}", `unknown filter "nosuchfilter"`},
		{"{% if flag %}{{ a | nosuch }}{% endif %}", `unknown filter "nosuch"`},
		{"{{ a is nosuchtest }}", `unknown test "nosuchtest"`},
		{"{{ 'x' + 1 }}", "unsupported operand type(s) for +: 'str' and 'int'"},
		{"{{ s - 1 }}", "unsupported operand type(s) for -"},
		{"{{ missing + 1 }}", `"missing" is undefined`},
		{"{{ a.b.c * 2 }}", `"c" is undefined`},
		{"{{ missing > 1 }}", `"missing" is undefined`},
		{"{{ 'a' < 1 }}", "'<' not supported between instances of 'str' and 'int'"},
		{"{{ 1 / 0 }}", "division by zero"},
		{"{{ 1 // 0 }}", "division or modulo by zero"},
		{"{{ [1, 'a'] | sort }}", "not supported"},
		{"{{ nosuchfunc() }}", `unknown function "nosuchfunc"`},
		{"{{ missing.get('x') }}", `"missing" is undefined`},
		{"{{ 'abc'.nosuch() }}", `has no method "nosuch"`},
		{"{{ 'x' | fromjson }}", "filter fromjson"},
		{"{{ '%%%' | b64decode }}", "invalid base64"},
		{"{% for x in a %}{% endfor %}", "'int' object is not iterable"},
		{"{% include 'other.j2' %}", "include"},
		{"{% extends 'base' %}", "extends"},
		{"{% macro m() %}{% endmacro %}", "macro"},
		{"{% if a %}unclosed", "syntax error"},
		{"{{ a", "syntax error"},
		{"{{ range(1000000) }}", "exceeds the limit"},
		{"{{ 'x' in 3 }}", "not iterable"},
		{"{{ 1 in 'abc' }}", "requires string as left operand"},
		{"{{ workload.__class__ }}", `template: forbidden attribute "__class__"`},
		{"{{ lipsum.__globals__ }}", `template: forbidden attribute "__globals__"`},
		{"{{ a['__class__'] }}", `template: forbidden attribute "__class__"`},
		{"{{ m['__in' ~ 'it__'] }}", `template: forbidden attribute "__init__"`},
		{"{{ a | attr('__dict__') }}", `template: forbidden attribute "__dict__"`},
		{"{{ f.func_globals }}", `template: forbidden attribute "func_globals"`},
		{"{{ config }}", `template: forbidden attribute: "config" is a Jinja global`},
		{"{{ lipsum(1) }}", `unknown function "lipsum"`},
		{"{% if false %}{{ x.__mro__ }}{% endif %}", `forbidden attribute "__mro__"`},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := r.Render(tc.in, testCtx())
			require.Error(t, err, "got %#v", got)
			require.Nil(t, got)
			require.Contains(t, err.Error(), tc.msg)
			var te *TemplateError
			require.True(t, errors.As(err, &te))
			require.Contains(t, te.Template, strings.TrimSpace(tc.in)[:2])
		})
	}
}

// TestForbiddenNamesThatAreData: a context that defines config (a step may be called so)
// reads it, and NoETL's own underscore names (_ref, _attempt) are data, not internals.
func TestForbiddenNamesThatAreData(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	got, err := r.Render("{{ config.x }}-{{ start._ref.id }}", map[string]any{"config": map[string]any{"x": 1}, "start": map[string]any{"_ref": map[string]any{"id": "r1"}}})
	require.NoError(t, err)
	require.Equal(t, "1-r1", got)
}

func TestEvalAndTruthy(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	ctx := testCtx()
	cases := []struct {
		expr   string
		value  any
		truthy bool
	}{
		{"a + 1", int64(3), true},
		{"{{ a + 1 }}", int64(3), true},
		{" {{ a == 3 }} ", false, false},
		{"event.name == 'loop.done'", false, false},
		{"output.status == 'error' and output.http.status in [429, 503]", false, false},
		{"missing", nil, false},
		{"missing.deep.deeper", nil, false},
		{"items", []any{int64(3), int64(1), int64(2)}, true},
		{"[]", []any{}, false},
		{"''", "", false},
		{"0.0", 0.0, false},
		{"'x'", "x", true},
		{"m", map[string]any{"k": "v", "n": int64(1)}, true},
		{"fetch.status == 'ok'", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			v, err := r.Eval(tc.expr, ctx)
			require.NoError(t, err)
			require.Equal(t, tc.value, v)
			ok, err := r.Truthy(tc.expr, ctx)
			require.NoError(t, err)
			require.Equal(t, tc.truthy, ok)
		})
	}

	// A failing condition is an error, never false.
	for _, bad := range []string{"a +", "a | nosuch", "'s' - 1", "missing + 1", "{{ a }} {{ a }}", ""} {
		t.Run("error "+bad, func(t *testing.T) {
			ok, err := r.Truthy(bad, ctx)
			require.Error(t, err)
			require.False(t, ok)
			_, err = r.Eval(bad, ctx)
			require.Error(t, err)
		})
	}
}

func TestRenderLimits(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	// The output budget is what these cases test: a time limit generous enough that a
	// loaded machine never trips it first.
	r.timeLimit = 5 * time.Minute
	cases := []string{
		"{{ 'x' * 2000000 }}",
		"{{ [1] * 2000000 }}",
		"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
		"{% set ns = namespace(s='x' * 16) %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
		"{{ 'ab' | replace('', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' * 40000) }}",
		// Counts whose product with the length overflows int64 (2**62, 2**62 + 1).
		"{{ 'ab' * 4611686018427387904 }}",
		"{{ 4611686018427387905 * 'abc' }}",
		"{{ [1, 2] * 4611686018427387904 }}",
	}
	for _, in := range cases {
		t.Run(in, func(t *testing.T) {
			_, err := r.Render(in, nil)
			require.ErrorIs(t, err, ErrOutputLimit)
		})
	}
	// Nothing repeated any number of times is nothing, at once.
	for in, want := range map[string]any{"{{ '' * 1000000000000000000 }}": "", "{{ [] * 1000000000000000000 }}": []any{}} {
		got, err := r.Render(in, nil)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	// The output budget covers what a whole Render call computes; lookups build nothing.
	big := strings.Repeat("y", MaxOutput/2+1)
	_, err := r.Render([]any{"{{ v ~ '' }}", "{{ v ~ '' }}"}, map[string]any{"v": big})
	require.ErrorIs(t, err, ErrOutputLimit)
	_, err = r.Render([]any{"{{ v ~ '' }}"}, map[string]any{"v": big})
	require.NoError(t, err)
	_, err = r.Render([]any{"{{ v }}", "{{ v }}", "{{ v }}"}, map[string]any{"v": big})
	require.NoError(t, err)

	slow := NewRenderer()
	slow.timeLimit = 50 * time.Millisecond
	_, err = slow.Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", nil)
	require.ErrorIs(t, err, ErrTimeLimit, "ten billion iterations stop at the time limit")
}

func TestRendererCache(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	for i := range cacheEntries + 100 {
		_, err := r.Render(fmt.Sprintf("{{ a + %d }}", i), testCtx())
		require.NoError(t, err)
	}
	require.Equal(t, cacheEntries, r.CacheLen())
	// Most recent entries are kept.
	v, err := r.Render(fmt.Sprintf("{{ a + %d }}", cacheEntries+99), testCtx())
	require.NoError(t, err)
	require.Equal(t, int64(cacheEntries+101), v)
	require.Equal(t, cacheEntries, r.CacheLen())
	// Compile errors are cached too, and stay errors.
	for range 2 {
		_, err = r.Render("{{ a + }}", nil)
		require.Error(t, err)
	}
}

func TestRendererConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				ctx := map[string]any{"i": int64(i), "g": int64(g)}
				v, err := r.Render(map[string]any{"x": "{{ i * 2 + g }}", "y": "{% for k in range(3) %}{{ k + i % 7 }}{% endfor %}"}, ctx)
				if err != nil {
					errs <- err
					return
				}
				m := v.(map[string]any)
				if m["x"] != int64(i*2+g) {
					errs <- fmt.Errorf("goroutine %d: got %v", g, m["x"])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   any
		want []string
	}{
		{"plain", []string{}},
		{"{{ fetch.data.x }}", []string{"fetch"}},
		{"{{ a }}-{{ b['k'] | default(c) }}", []string{"a", "b", "c"}},
		{"{{ x is defined and y in z }}", []string{"x", "y", "z"}},
		{"{% for u in users if u.ok %}{{ u.name }}{{ loop.index }}{{ other }}{% endfor %}", []string{"other", "users"}},
		{"{% set t = start.items %}{{ t }}{{ range(2) }}", []string{"start"}},
		{"{{ items | map(attribute='name') | join(sep) }}", []string{"items", "sep"}},
		{"{{ 'literal' ~ \"fetch\" }}", []string{}},
		{map[string]any{"{{ k }}": []any{"{{ v1 }}", map[string]any{"x": "{{ v2.a }}"}}}, []string{"k", "v1", "v2"}},
		{"{{ broken +", []string{}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			require.Equal(t, tc.want, Names(tc.in))
		})
	}
	_, dynamic := NameRefs("{{ broken +")
	require.True(t, dynamic)
}

func TestPyFloat(t *testing.T) {
	t.Parallel()
	cases := map[float64]string{1: "1.0", 1e16: "1e+16", 1e15: "1000000000000000.0", 1e-5: "1e-05", 0.0001: "0.0001", 0.1: "0.1", 123.456: "123.456", -2: "-2.0", 1.5e300: "1.5e+300"}
	for f, want := range cases {
		require.Equal(t, want, pyFloat(f), "%v", f)
	}
}

func TestLookupsPassLargeValuesThroughButComputedValuesAreBounded(t *testing.T) {
	r := NewRenderer()
	big := strings.Repeat("x", 2*MaxOutput)
	rows := make([]any, 100000)
	for i := range rows {
		rows[i] = map[string]any{"id": i, "name": "some name"}
	}
	ctx := map[string]any{"s": map[string]any{"blob": big, "rows": rows}}
	for _, tmpl := range []string{"{{ s.blob }}", "{{ s['blob'] }}", "{{ s.rows }}", "{{ s }}"} {
		_, err := r.Render(tmpl, ctx)
		require.NoError(t, err, tmpl)
	}
	for _, tmpl := range []string{"{{ s.blob ~ '' }}", "{{ s.rows | list }}", "x{{ s.blob }}"} {
		_, err := r.Render(tmpl, ctx)
		require.ErrorIs(t, err, ErrOutputLimit, tmpl)
	}
}

func TestHasTemplates(t *testing.T) {
	t.Parallel()
	r := NewRenderer()
	deep := any("plain")
	for range maxRenderDepth + 2 {
		deep = []any{deep}
	}
	cases := []struct {
		in   any
		want bool
	}{
		{nil, false},
		{"plain", false},
		{"{ not a template }", false},
		{map[string]any{"kind": "noop", "n": float64(1), "ok": true, "list": []any{"a", nil, json.Number("2")}}, false},
		{"{{ a }}", true},
		{"x {% if flag %}y{% endif %}", true},
		{map[string]any{"args": map[string]any{"v": []any{"a", "{{ i }}"}}}, true},
		{map[string]any{"{{ s }}": "key is a template"}, true},
		{deep, true}, // nested past Render's limit: Render fails, so it must be rendered
	}
	for _, c := range cases {
		require.Equal(t, c.want, HasTemplates(c.in), "%v", c.in)
		if c.want {
			continue
		}
		// What HasTemplates passes renders to itself whatever the context holds.
		for _, ctx := range []map[string]any{nil, testCtx()} {
			out, err := r.Render(c.in, ctx)
			require.NoError(t, err)
			require.Equal(t, c.in, out)
		}
	}
}

func TestExprNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr string
		want []string
	}{
		{"ctx.flag and i == 7", []string{"ctx", "i"}},
		{"{{ output.status == 'error' }}", []string{"output"}},
		{"  {{ x }}  ", []string{"x"}},
		{"items | length > limit", []string{"items", "limit"}},
	} {
		names, dynamic := ExprNames(c.expr)
		require.False(t, dynamic, c.expr)
		require.Equal(t, c.want, names, c.expr)
	}
	_, dynamic := ExprNames("a +")
	require.True(t, dynamic)
}
