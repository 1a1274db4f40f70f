package console

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/noetl/noetl/internal/playbook"
)

// Graph is a playbook's step graph, laid out for drawing: what the console's graph view
// draws and colours by the steps' statuses.
type Graph struct {
	// Path and Version name the playbook.
	Path    string `json:"path"`
	Version int64  `json:"version"`
	// Name and Description are the playbook's metadata.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Workload is the playbook's default workload (the start form's initial value).
	Workload map[string]any `json:"workload"`
	// Nodes are the steps in document order; Edges the arcs, by step then arc order.
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
	// Width and Height are the drawing's size in CSS pixels.
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
	// Crossings is the number of edge crossings left by the layout.
	Crossings int `json:"crossings"`
	// Warnings are the playbook's validation warnings, with their lines.
	Warnings []string `json:"warnings,omitempty"`
}

// Node is one step.
type Node struct {
	// Name is the step's name; Label the name as drawn (cut with an ellipsis when long).
	Name  string `json:"name"`
	Label string `json:"label"`
	// Desc is the step's description.
	Desc string `json:"desc,omitempty"`
	// Kind is the tool kind, "pipeline" for a list of tools (Tools names their kinds).
	Kind  string   `json:"kind"`
	Tools []string `json:"tools,omitempty"`
	// Loop describes the step's loop, nil when it does not loop.
	Loop *Loop `json:"loop,omitempty"`
	// When is the step's legacy guard, "" when it has none.
	When string `json:"when,omitempty"`
	// Line is the 1-based line of the step in the playbook.
	Line int `json:"line"`
	// Box is where the step is drawn.
	Box rect `json:"box"`
}

// Loop is a loop step's modifier.
type Loop struct {
	// Mode is sequential or parallel; MaxInFlight caps parallel iterations (0: default).
	Mode        string `json:"mode"`
	MaxInFlight int    `json:"max_in_flight,omitempty"`
	// Iterator is the name each element is bound to; In the collection's template.
	Iterator string `json:"iterator"`
	In       string `json:"in,omitempty"`
}

// Edge is one arc.
type Edge struct {
	// From and To are step names; Arc the arc's index among its step's arcs.
	From string `json:"from"`
	To   string `json:"to"`
	Arc  int    `json:"arc"`
	// When is the arc's condition as written ("" when it always fires); Label is what the
	// drawing shows: the condition without its braces (cut when long), "else" for an
	// unconditional arc after conditional ones of an exclusive step.
	When  string `json:"when,omitempty"`
	Label string `json:"label,omitempty"`
	// Mode is the source step's routing mode, exclusive or inclusive.
	Mode string `json:"mode"`
	// Back tells that the arc closes a cycle (drawn pointing back up); Self that it loops
	// on its own step.
	Back bool `json:"back,omitempty"`
	Self bool `json:"self,omitempty"`
	// D is the SVG path from the source to the target; LabelBox where the label is drawn.
	D        string `json:"d"`
	LabelBox *rect  `json:"label_box,omitempty"`
	// Line is the 1-based line of the arc in the playbook.
	Line int `json:"line"`
}

// loopCountChars is the room a node keeps on its second line for a loop's progress
// (" · loop 999/999") or a step's duration (" · 59.9s") or " · reused".
const (
	loopCountChars = 15
	durationChars  = 9
)

// buildGraph lays out pb's steps and arcs.
func buildGraph(path string, version int64, pb *playbook.Playbook) Graph {
	g := Graph{Path: path, Version: version, Name: pb.Metadata.Name, Description: pb.Metadata.Description, Workload: pb.Workload}
	if g.Workload == nil {
		g.Workload = map[string]any{}
	}
	for _, w := range pb.Warnings {
		msg := w.Msg
		if w.Step != "" {
			msg = "step " + w.Step + ": " + msg
		}
		if w.Line > 0 {
			msg = "line " + strconv.Itoa(w.Line) + ": " + msg
		}
		g.Warnings = append(g.Warnings, msg)
	}
	index := make(map[string]int, len(pb.Steps))
	boxes := make([]box, len(pb.Steps))
	root := -1
	for i, s := range pb.Steps {
		index[s.Name] = i
		if s.Name == "start" {
			root = i
		}
		n := Node{Name: s.Name, Label: cut(s.Name, nodeMaxName), Desc: s.Desc, Kind: "noop", When: s.When, Line: s.Line}
		switch {
		case s.Pipeline:
			n.Kind = "pipeline"
			for _, t := range s.Tool {
				n.Tools = append(n.Tools, t.Kind)
			}
		case len(s.Tool) == 1:
			n.Kind = s.Tool[0].Kind
		}
		sub := utf8.RuneCountInString(n.Kind) + durationChars
		if s.Loop != nil {
			n.Loop = &Loop{Mode: s.Loop.Mode, MaxInFlight: s.Loop.MaxInFlight, Iterator: s.Loop.Iterator, In: s.Loop.In}
			sub = utf8.RuneCountInString(n.Kind) + loopCountChars
		}
		w := max(nodeMinW, float64(utf8.RuneCountInString(n.Label))*nameCharW+nodePadW, float64(sub)*subCharW+nodePadW)
		boxes[i] = box{w: w, h: nodeH}
		g.Nodes = append(g.Nodes, n)
	}
	var links []link
	for _, s := range pb.Steps {
		if s.Next == nil {
			continue
		}
		conditional := false
		for k, a := range s.Next.Arcs {
			to, ok := index[a.Step]
			if !ok {
				continue
			}
			e := Edge{From: s.Name, To: a.Step, Arc: k, When: a.When, Mode: s.Next.Mode, Self: a.Step == s.Name, Line: a.Line}
			switch {
			case a.When != "":
				e.Label = cut(condition(a.When), labelMaxText)
				conditional = true
			case conditional && s.Next.Mode != playbook.ModeInclusive:
				e.Label = "else"
			}
			l := link{from: index[s.Name], to: to}
			if e.Label != "" {
				l.labelW = float64(utf8.RuneCountInString(e.Label))*labelCharW + labelPadW
			}
			links = append(links, l)
			g.Edges = append(g.Edges, e)
		}
	}
	d := layout(boxes, links, root)
	for i := range g.Nodes {
		g.Nodes[i].Box = d.boxes[i]
	}
	for i := range g.Edges {
		r := d.routes[i]
		g.Edges[i].D, g.Edges[i].LabelBox, g.Edges[i].Back = r.d, r.label, r.back && !g.Edges[i].Self
	}
	g.Width, g.Height, g.Crossings = d.w, d.h, d.crossings
	return g
}

// condition is a `when` as shown: a single template's body without its braces.
func condition(when string) string {
	s := strings.TrimSpace(when)
	if strings.HasPrefix(s, "{{") && strings.HasSuffix(s, "}}") && strings.Count(s, "{{") == 1 {
		s = strings.TrimSpace(s[2 : len(s)-2])
	}
	return strings.Join(strings.Fields(s), " ")
}

// cut shortens s to at most n runes, ending it with an ellipsis when it was longer.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
