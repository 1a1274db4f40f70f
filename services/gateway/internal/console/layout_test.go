package console

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/noetl/noetl/internal/playbook"
)

// checkDrawing fails unless no two boxes, labels or box and label overlap, every link
// that does not close a cycle goes down, and everything is inside the drawing.
func checkDrawing(t require.TestingT, boxes []box, links []link, d drawing) {
	var rects []rect
	var what []string
	for i, b := range d.boxes {
		require.InDelta(t, boxes[i].w, b.W, 1e-9)
		rects = append(rects, b)
		what = append(what, fmt.Sprintf("box %d", i))
	}
	for i, r := range d.routes {
		require.NotEmpty(t, r.d, "link %d has no path", i)
		require.NotContains(t, r.d, "NaN", "link %d", i)
		if links[i].labelW > 0 {
			require.NotNil(t, r.label, "link %d has no label box", i)
			rects = append(rects, *r.label)
			what = append(what, fmt.Sprintf("label of link %d", i))
		}
		l := links[i]
		if l.from != l.to && !r.back {
			require.Greater(t, d.boxes[l.to].Y, d.boxes[l.from].Y+d.boxes[l.from].H, "link %d (%d->%d) does not go down", i, l.from, l.to)
		}
	}
	for a := range rects {
		ra := rects[a]
		require.GreaterOrEqual(t, ra.X, 0.0, what[a])
		require.GreaterOrEqual(t, ra.Y, 0.0, what[a])
		require.LessOrEqual(t, ra.X+ra.W, d.w+1e-9, what[a])
		require.LessOrEqual(t, ra.Y+ra.H, d.h+1e-9, what[a])
		for b := a + 1; b < len(rects); b++ {
			require.False(t, ra.overlaps(rects[b]), "%s %+v overlaps %s %+v", what[a], ra, what[b], rects[b])
		}
	}
}

func TestLayoutNeverOverlaps(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "steps")
		boxes := make([]box, n)
		for i := range boxes {
			boxes[i] = box{w: rapid.Float64Range(nodeMinW, 260).Draw(t, "w"), h: nodeH}
		}
		var links []link
		for range rapid.IntRange(0, 3*n).Draw(t, "links") {
			l := link{from: rapid.IntRange(0, n-1).Draw(t, "from"), to: rapid.IntRange(0, n-1).Draw(t, "to")}
			if rapid.Bool().Draw(t, "labelled") {
				l.labelW = rapid.Float64Range(20, 250).Draw(t, "labelW")
			}
			links = append(links, l)
		}
		checkDrawing(t, boxes, links, layout(boxes, links, rapid.IntRange(-1, n-1).Draw(t, "root")))
	})
}

// A tree draws without a crossing, and a 30-step playbook of fan-outs, conditions and
// joins lays out with none or few, without an overlap.
func TestLayoutOfTreesAndThirtySteps(t *testing.T) {
	t.Parallel()
	var boxes []box
	var links []link
	for i := range 31 {
		boxes = append(boxes, box{w: nodeMinW, h: nodeH})
		if i > 0 {
			links = append(links, link{from: (i - 1) / 2, to: i, labelW: 60})
		}
	}
	d := layout(boxes, links, 0)
	checkDrawing(t, boxes, links, d)
	require.Zero(t, d.crossings)

	g := buildGraph("tests/thirty", 1, parse(t, thirtySteps()))
	require.Len(t, g.Nodes, 30)
	require.LessOrEqual(t, g.Crossings, 2, "crossings")
	var bs []box
	for _, n := range g.Nodes {
		bs = append(bs, box{w: n.Box.W, h: n.Box.H})
	}
	index := map[string]int{}
	for i, n := range g.Nodes {
		index[n.Name] = i
	}
	var ls []link
	var routes []route
	for _, e := range g.Edges {
		l := link{from: index[e.From], to: index[e.To]}
		if e.LabelBox != nil {
			l.labelW = e.LabelBox.W
		}
		ls = append(ls, l)
		routes = append(routes, route{d: e.D, label: e.LabelBox, back: e.Back || e.Self})
	}
	var rs []rect
	for _, n := range g.Nodes {
		rs = append(rs, n.Box)
	}
	checkDrawing(t, bs, ls, drawing{boxes: rs, routes: routes, w: g.Width, h: g.Height})
}

// thirtySteps is a playbook of 30 steps: a fan-out to three branches, one of them a
// loop, conditional arcs, a join, a retry cycle and a tail.
func thirtySteps() string {
	var b strings.Builder
	b.WriteString("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: thirty, path: tests/thirty}\nworkflow:\n")
	step := func(name, next string) {
		fmt.Fprintf(&b, "  - step: %s\n    tool: {kind: noop}\n", name)
		if next != "" {
			fmt.Fprintf(&b, "    next: %s\n", next)
		}
	}
	step("start", "[extract_orders, extract_customers, extract_products]")
	step("extract_orders", "{arcs: [{step: validate_orders, when: '{{ extract_orders.rows > 0 }}'}, {step: report_empty}]}")
	step("extract_customers", "[dedupe_customers]")
	step("extract_products", "[enrich_products]")
	step("validate_orders", "{arcs: [{step: load_orders, when: '{{ validate_orders.ok }}'}, {step: quarantine_orders}]}")
	step("report_empty", "[join]")
	step("quarantine_orders", "[join]")
	step("load_orders", "[join]")
	step("dedupe_customers", "[score_customers]")
	step("score_customers", "{arcs: [{step: vip_customers, when: '{{ score_customers.top | length > 10 }}'}, {step: join}]}")
	step("vip_customers", "[join]")
	step("enrich_products", "[price_products]")
	step("price_products", "[join]")
	step("join", "[aggregate]")
	step("aggregate", "[poll_export]")
	step("poll_export", "{arcs: [{step: poll_export, when: '{{ not poll_export.done }}'}, {step: publish, when: '{{ poll_export.done }}'}]}")
	step("publish", "[notify_email, notify_chat, archive]")
	step("notify_email", "[cleanup]")
	step("notify_chat", "[cleanup]")
	step("archive", "{arcs: [{step: verify_archive}]}")
	step("verify_archive", "{arcs: [{step: archive, when: '{{ not verify_archive.ok }}'}, {step: cleanup}]}")
	step("cleanup", "[metrics]")
	step("metrics", "[dashboard_refresh]")
	step("dashboard_refresh", "[audit_log]")
	step("audit_log", "[sla_check]")
	step("sla_check", "{arcs: [{step: page_oncall, when: '{{ sla_check.late_minutes > 30 }}'}, {step: done_ok}]}")
	step("page_oncall", "[end]")
	step("done_ok", "[end]")
	step("unreachable_helper", "[end]")
	step("end", "")
	return b.String()
}

func parse(t *testing.T, src string) *playbook.Playbook {
	t.Helper()
	pb, err := playbook.Parse([]byte(src))
	require.NoError(t, err)
	return pb
}

func TestGraphOfAPlaybook(t *testing.T) {
	t.Parallel()
	g := buildGraph("tests/g", 3, parse(t, `
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: g, path: tests/g, description: a graph}
workload: {items: [1, 2, 3]}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: it, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: python, code: "result = 1"}
    next:
      arcs:
        - {step: big, when: "{{ start | length > 2 }}"}
        - {step: small}
  - step: big
    tool: [{name: a, kind: noop}, {name: b, kind: python, code: "result = 2"}]
    next: [end]
  - step: small
    tool: {kind: noop}
    next: [end]
  - step: end
    tool: {kind: noop}
`))
	require.Equal(t, "g", g.Name)
	require.Equal(t, map[string]any{"items": []any{int64(1), int64(2), int64(3)}}, g.Workload)
	require.Len(t, g.Nodes, 4)
	require.Equal(t, &Loop{Mode: "parallel", MaxInFlight: 2, Iterator: "it", In: "{{ workload.items }}"}, g.Nodes[0].Loop)
	require.Equal(t, "pipeline", g.Nodes[1].Kind)
	require.Equal(t, []string{"noop", "python"}, g.Nodes[1].Tools)
	require.Len(t, g.Edges, 4)
	require.Equal(t, "start | length > 2", g.Edges[0].Label)
	require.Equal(t, "{{ start | length > 2 }}", g.Edges[0].When)
	require.Equal(t, "else", g.Edges[1].Label, "an unconditional arc after a conditional one of an exclusive step")
	require.Empty(t, g.Edges[2].Label)
	for _, e := range g.Edges {
		require.False(t, e.Back)
		require.True(t, strings.HasPrefix(e.D, "M"), e.D)
	}
	// start is on top, end at the bottom.
	require.Less(t, g.Nodes[0].Box.Y, g.Nodes[1].Box.Y)
	require.Less(t, g.Nodes[1].Box.Y, g.Nodes[3].Box.Y)
	require.False(t, math.IsNaN(g.Width))
}

func TestConditionAndCut(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"{{ a.ok }}":              "a.ok",
		"  {{a  and\n b}} ":       "a and b",
		"{{ a }} and {{ b }}":     "{{ a }} and {{ b }}",
		"plain":                   "plain",
		"{{ x | default('}}') }}": "x | default('}}')",
	} {
		require.Equal(t, want, condition(in), in)
	}
	require.Equal(t, "abc", cut("abc", 3))
	require.Equal(t, "ab…", cut("abcd", 3))
	require.Equal(t, "éé…", cut("ééééé", 3))
}
