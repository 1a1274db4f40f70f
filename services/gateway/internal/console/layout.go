package console

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The step graph is laid out top to bottom in layers (Sugiyama's method):
//
//  1. Cycles are broken: a depth-first search from the root (the step named start, then
//     every step in document order) marks the arcs back to a step on its stack; they are
//     laid out reversed and drawn pointing back up.
//  2. Layers by longest path: a step sits one layer below the lowest of its predecessors.
//  3. Ranks: layer L is rank 2L; the odd rank between two layers holds the edges' labels.
//     An edge is a chain of dummy items, one per rank it crosses, and the dummy next to its
//     source is as wide as its label, so labels take room in a rank like steps do.
//  4. Order within ranks: barycentre sweeps down and up, each followed by a pass of
//     transpositions of neighbours, keeping the order with the fewest crossings.
//  5. Horizontal positions: each rank in turn is placed as close as it can be to the mean
//     of its neighbours in the rank above (then below) while keeping its order and the
//     minimum separations; that is an isotonic regression, solved exactly by pooling
//     adjacent violators. Dummies weigh more, which straightens long edges.
//  6. Edges run straight down their lanes inside ranks and as vertical-tangent cubic
//     curves in the gaps between ranks, where nothing else is drawn.
//
// No two items of a rank overlap (their separation is a constraint of step 5) and ranks
// are stacked without overlap, so no step box, label or edge lane overlaps another.

// Sizes of the drawing, in CSS pixels. The console draws step names and labels in a
// monospace font whose advance is about 0.6 em (0.602 em in DejaVu Sans Mono and Menlo);
// these widths assume a little more.
const (
	nodeH        = 46.0
	nodeMinW     = 132.0
	nodeMaxName  = 30 // runes of a step name shown; longer names are cut with an ellipsis
	nameCharW    = 8.0
	subCharW     = 6.5
	nodePadW     = 44.0 // the status mark on the left and the padding on the right
	labelH       = 18.0
	labelCharW   = 6.8
	labelPadW    = 10.0
	labelMaxText = 36 // runes of an arc's condition shown on its label
	laneW        = 12.0
	labelLead    = 6.0 // from a labelled edge's lane to its label
	nodeGap      = 28.0
	dummyGap     = 10.0
	rankGap      = 24.0
	margin       = 16.0
	selfBulge    = 22.0
)

// box is an item to lay out: a step's box.
type box struct {
	w, h float64
}

// link is an arc to lay out; labelW is zero for an arc without a label.
type link struct {
	from, to int
	labelW   float64
}

// rect is a placed rectangle, by its top-left corner.
type rect struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
	W float64 `json:"w"`
	H float64 `json:"h"`
}

func (r rect) overlaps(o rect) bool {
	return r.X < o.X+o.W && o.X < r.X+r.W && r.Y < o.Y+o.H && o.Y < r.Y+r.H
}

// route is how a link is drawn: an SVG path from its source to its target, the rectangle
// of its label (nil without one), and whether it closes a cycle.
type route struct {
	d     string
	label *rect
	back  bool
}

// drawing is a laid-out graph.
type drawing struct {
	boxes  []rect
	routes []route
	w, h   float64
	// crossings is the number of edge crossings of the order chosen.
	crossings int
}

// item is one slot of a rank: a step, or a dummy on an edge.
type item struct {
	node     int // the step, -1 for a dummy
	rank     int
	w, h     float64
	x        float64 // centre
	weight   float64
	labelled bool
	up, down []int
}

type layouter struct {
	items []item
	ranks [][]int   // item indices in order
	pos   []int     // index of each item within its rank
	bary  []float64 // scratch of sortBy, by item
}

// orderBudget is the number of items (steps and dummies) past which the crossing
// reduction does no transpositions; past a tenth of it, fewer sweeps.
const orderBudget = 5000

// layout lays out boxes and links with root (an index of boxes, or -1) at the top.
func layout(boxes []box, links []link, root int) drawing {
	n := len(boxes)
	out := drawing{boxes: make([]rect, n), routes: make([]route, len(links))}
	if n == 0 {
		out.w, out.h = 2*margin, 2*margin
		return out
	}
	// Self-loops are drawn beside their step, which reserves room on its right.
	selfRight := make([]float64, n)
	selfCount := make([]int, n)
	for _, l := range links {
		if l.from == l.to {
			selfCount[l.from]++
			selfRight[l.from] = math.Max(selfRight[l.from], l.labelW)
		}
	}
	reserve := func(v int) float64 {
		if selfCount[v] == 0 {
			return 0
		}
		r := selfBulge + 6*float64(selfCount[v]-1) + 4
		if selfRight[v] > 0 {
			r += selfRight[v] + 4
		}
		return r
	}

	back := breakCycles(n, links, root)
	layer := longestPath(n, links, back, root)

	lo := &layouter{}
	for v := range n {
		h := math.Max(boxes[v].h, float64(selfCount[v])*(labelH+2))
		lo.items = append(lo.items, item{node: v, rank: 2 * layer[v], w: boxes[v].w + reserve(v), h: h, weight: 1})
	}
	// chains[i] are the items of link i in layout orientation (upper end first).
	chains := make([][]int, len(links))
	for i, l := range links {
		if l.from == l.to {
			continue
		}
		a, b := l.from, l.to
		if back[i] {
			a, b = b, a
		}
		chain := []int{a}
		ra, rb := lo.items[a].rank, lo.items[b].rank
		for r := ra + 1; r < rb; r++ {
			// The label sits next to the arc's source: the first dummy, or the last for an
			// arc laid out reversed.
			labelled := l.labelW > 0 && ((!back[i] && r == ra+1) || (back[i] && r == rb-1))
			it := item{node: -1, rank: r, w: laneW, weight: 4}
			if labelled {
				it.w, it.h, it.labelled = laneW/2+labelLead+l.labelW+2, labelH, true
			}
			lo.items = append(lo.items, it)
			chain = append(chain, len(lo.items)-1)
		}
		chain = append(chain, b)
		for k := 0; k+1 < len(chain); k++ {
			u, w := chain[k], chain[k+1]
			lo.items[u].down = append(lo.items[u].down, w)
			lo.items[w].up = append(lo.items[w].up, u)
		}
		chains[i] = chain
	}
	maxRank := 0
	for _, it := range lo.items {
		maxRank = max(maxRank, it.rank)
	}
	lo.ranks = make([][]int, maxRank+1)
	lo.pos = make([]int, len(lo.items))
	// Initial order: steps in depth-first order from the root, dummies as created.
	for _, v := range preorder(n, links, root) {
		lo.ranks[lo.items[v].rank] = append(lo.ranks[lo.items[v].rank], v)
	}
	for i := n; i < len(lo.items); i++ {
		lo.ranks[lo.items[i].rank] = append(lo.ranks[lo.items[i].rank], i)
	}
	lo.index()
	out.crossings = lo.order()
	lo.place()

	// Vertical positions: a rank is as tall as its tallest item, with a gap between ranks.
	top := make([]float64, len(lo.ranks))
	bottom := make([]float64, len(lo.ranks))
	y := margin
	for r, rank := range lo.ranks {
		hmax := 0.0
		for _, i := range rank {
			hmax = math.Max(hmax, lo.items[i].h)
		}
		top[r], bottom[r] = y, y+hmax
		y += hmax + rankGap
	}
	out.h = y - rankGap + margin
	minX := math.Inf(1)
	for _, it := range lo.items {
		minX = math.Min(minX, it.x-it.w/2)
	}
	shift := margin - minX
	for i := range lo.items {
		lo.items[i].x += shift
	}
	width := 0.0
	for _, it := range lo.items {
		width = math.Max(width, it.x+it.w/2)
	}
	out.w = width + margin
	for v := range n {
		it := lo.items[v]
		left := it.x - it.w/2
		out.boxes[v] = rect{X: left, Y: top[it.rank] + (bottom[it.rank]-top[it.rank]-boxes[v].h)/2, W: boxes[v].w, H: boxes[v].h}
	}

	// Ports: the edges leaving a step spread along its bottom, those entering along its top,
	// in the order of their other ends, so that they do not cross at the step.
	outPort := make(map[int]float64)
	inPort := make(map[int]float64)
	ports := func(v int, ends map[int]int, into map[int]float64) {
		ids := make([]int, 0, len(ends))
		for id := range ends {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b int) int {
			return cmp.Or(cmp.Compare(lo.items[ends[a]].x, lo.items[ends[b]].x), cmp.Compare(a, b))
		})
		b := out.boxes[v]
		for k, id := range ids {
			into[id] = b.X + b.W*0.15 + b.W*0.7*(float64(k)+0.5)/float64(len(ids))
		}
	}
	outs := make([]map[int]int, n)
	ins := make([]map[int]int, n)
	for i, ch := range chains {
		if ch == nil {
			continue
		}
		a, b := ch[0], ch[len(ch)-1]
		if outs[a] == nil {
			outs[a] = map[int]int{}
		}
		if ins[b] == nil {
			ins[b] = map[int]int{}
		}
		outs[a][i] = ch[1]
		ins[b][i] = ch[len(ch)-2]
	}
	for v := range n {
		ports(v, outs[v], outPort)
		ports(v, ins[v], inPort)
	}
	lane := func(i int) float64 {
		it := lo.items[i]
		if it.labelled {
			return it.x - it.w/2 + laneW/2
		}
		return it.x
	}

	selfSeen := make([]int, n)
	for i, l := range links {
		if l.from == l.to {
			out.routes[i] = selfRoute(out.boxes[l.from], selfSeen[l.from], selfCount[l.from], l.labelW)
			selfSeen[l.from]++
			continue
		}
		ch := chains[i]
		a, b := ch[0], ch[len(ch)-1]
		var p svgPath
		ba, bb := out.boxes[a], out.boxes[b]
		x := outPort[i]
		p.move(x, ba.Y+ba.H)
		p.line(x, bottom[lo.items[a].rank])
		var lab *rect
		for _, d := range ch[1 : len(ch)-1] {
			it := lo.items[d]
			if top[it.rank] == bottom[it.rank] {
				// A rank with no height holds nothing the edge could cross: one curve
				// spans it, rather than two with a kink between.
				continue
			}
			lx := lane(d)
			p.curve(lx, top[it.rank])
			p.line(lx, bottom[it.rank])
			if it.labelled {
				lab = &rect{X: lx + labelLead, Y: top[it.rank], W: links[i].labelW, H: labelH}
			}
		}
		x = inPort[i]
		p.curve(x, top[lo.items[b].rank])
		p.line(x, bb.Y)
		if back[i] {
			p.reverse()
		}
		out.routes[i] = route{d: p.String(), label: lab, back: back[i]}
	}
	return out
}

// selfRoute draws the k-th of count self-loops of a step boxed in b: a bulge out of its
// right side, with its label beside the bulges.
func selfRoute(b rect, k, count int, labelW float64) route {
	right := b.X + b.W
	y1, y2 := b.Y+10, b.Y+b.H-10
	bulge := selfBulge + 6*float64(k)
	d := "M" + num(right) + "," + num(y1) + "C" + num(right+bulge) + "," + num(y1-6) + " " + num(right+bulge) + "," + num(y2+6) + " " + num(right) + "," + num(y2)
	r := route{d: d, back: true}
	if labelW > 0 {
		// The labels of a step's self-loops are stacked beside it, centred on it (its rank
		// is as tall as the stack).
		lx := right + selfBulge + 6*float64(count-1) + 4
		y := b.Y + b.H/2 - float64(count)*(labelH+2)/2 + 1 + float64(k)*(labelH+2)
		r.label = &rect{X: lx, Y: y, W: labelW, H: labelH}
	}
	return r
}

// breakCycles returns, by link, whether the link goes back to a step on the depth-first
// search's stack (a cycle's closing arc). Self-loops are not marked: they are drawn apart.
func breakCycles(n int, links []link, root int) []bool {
	outs := make([][]int, n)
	for i, l := range links {
		if l.from != l.to {
			outs[l.from] = append(outs[l.from], i)
		}
	}
	back := make([]bool, len(links))
	state := make([]uint8, n) // 0 unseen, 1 on the stack, 2 done
	var visit func(v int)
	visit = func(v int) {
		state[v] = 1
		for _, i := range outs[v] {
			switch state[links[i].to] {
			case 0:
				visit(links[i].to)
			case 1:
				back[i] = true
			}
		}
		state[v] = 2
	}
	for _, v := range roots(n, root) {
		if state[v] == 0 {
			visit(v)
		}
	}
	return back
}

// preorder is the depth-first order of the steps from the root, then from each unseen step.
func preorder(n int, links []link, root int) []int {
	outs := make([][]int, n)
	for _, l := range links {
		outs[l.from] = append(outs[l.from], l.to)
	}
	seen := make([]bool, n)
	var order []int
	var visit func(v int)
	visit = func(v int) {
		seen[v] = true
		order = append(order, v)
		for _, w := range outs[v] {
			if !seen[w] {
				visit(w)
			}
		}
	}
	for _, v := range roots(n, root) {
		if !seen[v] {
			visit(v)
		}
	}
	return order
}

func roots(n, root int) []int {
	out := make([]int, 0, n+1)
	if root >= 0 && root < n {
		out = append(out, root)
	}
	for v := range n {
		out = append(out, v)
	}
	return out
}

// longestPath assigns layers: a step sits one below the lowest of its predecessors (in the
// graph with the back links reversed); a step other than the root that nothing leads to sits
// just above the highest of its successors.
func longestPath(n int, links []link, back []bool, root int) []int {
	outs := make([][]int, n)
	indeg := make([]int, n)
	preds := make([][]int, n)
	for i, l := range links {
		if l.from == l.to {
			continue
		}
		a, b := l.from, l.to
		if back[i] {
			a, b = b, a
		}
		outs[a] = append(outs[a], b)
		preds[b] = append(preds[b], a)
		indeg[b]++
	}
	layer := make([]int, n)
	queue := make([]int, 0, n)
	for v := range n {
		if indeg[v] == 0 {
			queue = append(queue, v)
		}
	}
	var topo []int
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		topo = append(topo, v)
		for _, w := range outs[v] {
			layer[w] = max(layer[w], layer[v]+1)
			if indeg[w]--; indeg[w] == 0 {
				queue = append(queue, w)
			}
		}
	}
	// Sources other than the first are pulled down next to what they lead to, latest first
	// so that a chain of them moves together.
	for k := len(topo) - 1; k >= 0; k-- {
		v := topo[k]
		if len(preds[v]) > 0 || len(outs[v]) == 0 || v == root {
			continue
		}
		lowest := math.MaxInt
		for _, w := range outs[v] {
			lowest = min(lowest, layer[w])
		}
		layer[v] = max(layer[v], lowest-1)
	}
	return layer
}

func (lo *layouter) index() {
	for _, rank := range lo.ranks {
		for k, i := range rank {
			lo.pos[i] = k
		}
	}
}

// order reduces crossings by barycentre sweeps and transpositions and returns the number
// of crossings of the best order found, which it leaves in place.
func (lo *layouter) order() int {
	best := lo.snapshot()
	bestC := lo.crossings()
	// The work is bounded: a playbook of thousands of steps gets fewer sweeps, and no
	// transpositions past orderBudget items.
	sweeps := 24
	if len(lo.items) > orderBudget/10 {
		sweeps = max(2, 24*orderBudget/10/len(lo.items))
	}
	lo.bary = make([]float64, len(lo.items))
	for iter := 0; iter < sweeps && bestC > 0; iter++ {
		if iter%2 == 0 {
			for r := 1; r < len(lo.ranks); r++ {
				lo.sortBy(r, true)
			}
		} else {
			for r := len(lo.ranks) - 2; r >= 0; r-- {
				lo.sortBy(r, false)
			}
		}
		if len(lo.items) <= orderBudget {
			lo.transpose()
		}
		if c := lo.crossings(); c < bestC {
			best, bestC = lo.snapshot(), c
		}
	}
	lo.ranks = best
	lo.index()
	return bestC
}

func (lo *layouter) snapshot() [][]int {
	out := make([][]int, len(lo.ranks))
	for r, rank := range lo.ranks {
		out[r] = slices.Clone(rank)
	}
	return out
}

// sortBy orders rank r by the mean position of each item's neighbours above (up) or below;
// an item without any keeps its place.
func (lo *layouter) sortBy(r int, up bool) {
	rank := lo.ranks[r]
	bary := lo.bary
	for _, i := range rank {
		ns := lo.items[i].down
		if up {
			ns = lo.items[i].up
		}
		if len(ns) == 0 {
			bary[i] = float64(lo.pos[i])
			continue
		}
		s := 0.0
		for _, j := range ns {
			s += float64(lo.pos[j])
		}
		bary[i] = s / float64(len(ns))
	}
	slices.SortStableFunc(rank, func(a, b int) int { return cmp.Compare(bary[a], bary[b]) })
	for k, i := range rank {
		lo.pos[i] = k
	}
}

// crossings counts the edge crossings between every pair of adjacent ranks.
func (lo *layouter) crossings() int {
	c := 0
	for r := 0; r+1 < len(lo.ranks); r++ {
		c += lo.crossingsBetween(r)
	}
	return c
}

// crossingsBetween counts the crossings of the edges between ranks r and r+1: the edges
// sorted by their upper end, the inversions of their lower ends (a Fenwick tree).
func (lo *layouter) crossingsBetween(r int) int {
	var lower []int
	for _, i := range lo.ranks[r] { // in order: the upper ends ascend
		start := len(lower)
		for _, j := range lo.items[i].down {
			lower = append(lower, lo.pos[j])
		}
		slices.Sort(lower[start:])
	}
	tree := make([]int, len(lo.ranks[r+1])+1)
	c := 0
	for k, b := range lower {
		// Edges seen so far whose lower end is right of b cross this one.
		seen := 0
		for x := b + 1; x > 0; x -= x & -x {
			seen += tree[x]
		}
		c += k - seen
		for x := b + 1; x < len(tree); x += x & -x {
			tree[x]++
		}
	}
	return c
}

// pairCrossings counts the crossings between the edges of u and of v, u left of v, to
// their neighbours ns (above or below).
func (lo *layouter) pairCrossings(u, v int, ns func(int) []int) int {
	c := 0
	for _, a := range ns(u) {
		for _, b := range ns(v) {
			if lo.pos[a] > lo.pos[b] {
				c++
			}
		}
	}
	return c
}

// transpose swaps neighbours of a rank while that lowers the crossings around them.
func (lo *layouter) transpose() {
	up := func(i int) []int { return lo.items[i].up }
	down := func(i int) []int { return lo.items[i].down }
	for pass := 0; pass < 4; pass++ {
		improved := false
		for r, rank := range lo.ranks {
			for k := 0; k+1 < len(rank); k++ {
				u, v := rank[k], rank[k+1]
				now := lo.pairCrossings(u, v, up) + lo.pairCrossings(u, v, down)
				swapped := lo.pairCrossings(v, u, up) + lo.pairCrossings(v, u, down)
				if swapped < now {
					lo.swap(r, k)
					improved = true
				}
			}
		}
		if !improved {
			return
		}
	}
}

func (lo *layouter) swap(r, k int) {
	rank := lo.ranks[r]
	rank[k], rank[k+1] = rank[k+1], rank[k]
	lo.pos[rank[k]], lo.pos[rank[k+1]] = k, k+1
}

// place sets the items' horizontal centres.
func (lo *layouter) place() {
	for _, rank := range lo.ranks {
		x := 0.0
		for k, i := range rank {
			if k > 0 {
				x += lo.sep(rank[k-1], i)
			}
			lo.items[i].x = x
		}
	}
	for iter := range 12 {
		dir := iter % 2
		if iter >= 10 {
			dir = 2
		}
		switch dir {
		case 0:
			for r := 1; r < len(lo.ranks); r++ {
				lo.align(r, true, false)
			}
		case 1:
			for r := len(lo.ranks) - 2; r >= 0; r-- {
				lo.align(r, false, true)
			}
		default:
			for r := range lo.ranks {
				lo.align(r, true, true)
			}
		}
	}
}

// sep is the least distance between the centres of neighbours a and b of a rank.
func (lo *layouter) sep(a, b int) float64 {
	gap := nodeGap
	if lo.items[a].node < 0 || lo.items[b].node < 0 {
		gap = dummyGap
	}
	return (lo.items[a].w+lo.items[b].w)/2 + gap
}

// align moves rank r as close as its order and separations allow to the mean centre of
// each item's neighbours (above when up, below when down), by weighted isotonic regression.
func (lo *layouter) align(r int, up, down bool) {
	rank := lo.ranks[r]
	if len(rank) == 0 {
		return
	}
	want := make([]float64, len(rank))
	weight := make([]float64, len(rank))
	off := make([]float64, len(rank))
	for k, i := range rank {
		if k > 0 {
			off[k] = off[k-1] + lo.sep(rank[k-1], i)
		}
		var ns []int
		if up {
			ns = append(ns, lo.items[i].up...)
		}
		if down {
			ns = append(ns, lo.items[i].down...)
		}
		if len(ns) == 0 {
			want[k], weight[k] = lo.items[i].x, 0.25
		} else {
			s := 0.0
			for _, j := range ns {
				s += lo.items[j].x
			}
			want[k], weight[k] = s/float64(len(ns)), lo.items[i].weight
		}
		want[k] -= off[k]
	}
	y := isotonic(want, weight)
	for k, i := range rank {
		lo.items[i].x = y[k] + off[k]
	}
}

// isotonic returns the non-decreasing sequence closest to v in weighted least squares
// (pool adjacent violators).
func isotonic(v, w []float64) []float64 {
	type block struct {
		sum, weight float64
		n           int
	}
	var blocks []block
	for k := range v {
		blocks = append(blocks, block{v[k] * w[k], w[k], 1})
		for len(blocks) > 1 {
			a, b := blocks[len(blocks)-2], blocks[len(blocks)-1]
			if a.sum/a.weight <= b.sum/b.weight {
				break
			}
			blocks = blocks[:len(blocks)-2]
			blocks = append(blocks, block{a.sum + b.sum, a.weight + b.weight, a.n + b.n})
		}
	}
	out := make([]float64, 0, len(v))
	for _, b := range blocks {
		m := b.sum / b.weight
		for range b.n {
			out = append(out, m)
		}
	}
	return out
}

// svgPath builds an SVG path of straight segments and vertical-tangent cubic curves.
type svgPath struct {
	pts    [][2]float64
	curved []bool // curved[k]: the segment from pts[k] to pts[k+1] is a curve
}

func (p *svgPath) move(x, y float64) { p.pts = append(p.pts[:0], [2]float64{x, y}) }

func (p *svgPath) line(x, y float64) {
	if last := p.pts[len(p.pts)-1]; last == [2]float64{x, y} {
		return
	}
	p.pts = append(p.pts, [2]float64{x, y})
	p.curved = append(p.curved, false)
}

func (p *svgPath) curve(x, y float64) {
	p.pts = append(p.pts, [2]float64{x, y})
	p.curved = append(p.curved, true)
}

func (p *svgPath) reverse() {
	slices.Reverse(p.pts)
	slices.Reverse(p.curved)
}

func (p *svgPath) String() string {
	var b strings.Builder
	b.WriteString("M" + num(p.pts[0][0]) + "," + num(p.pts[0][1]))
	for k, c := range p.curved {
		a, z := p.pts[k], p.pts[k+1]
		if !c {
			b.WriteString("L" + num(z[0]) + "," + num(z[1]))
			continue
		}
		mid := (a[1] + z[1]) / 2
		b.WriteString("C" + num(a[0]) + "," + num(mid) + " " + num(z[0]) + "," + num(mid) + " " + num(z[0]) + "," + num(z[1]))
	}
	return b.String()
}

// num formats a coordinate with at most one decimal.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}
