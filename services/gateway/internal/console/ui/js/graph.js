// The step graph: the layout the gateway computed (GET /ui/api/graph) drawn in SVG, each
// step coloured, marked and worded by its status, each arc by whether it fired.

import {h, svg, GLYPH, compact, short} from './dom.js';

const STATUSES = ['pending', 'running', 'completed', 'failed', 'skipped', 'cancelled'];

/** legend lists the statuses with their marks. */
export function legend() {
  return h('ul', {class: 'legend', 'aria-label': 'Legend'},
    STATUSES.map((s) => h('li', {class: 's-' + s}, h('span', {class: 'glyph', 'aria-hidden': 'true'}, GLYPH[s]), s)),
    h('li', {class: 'edge-key fired'}, h('span', {class: 'line', 'aria-hidden': 'true'}), 'arc taken'),
    h('li', {class: 'edge-key not-taken'}, h('span', {class: 'line', 'aria-hidden': 'true'}), 'arc not taken'),
    h('li', {class: 'edge-key back'}, h('span', {class: 'line', 'aria-hidden': 'true'}), 'back to an earlier step'));
}

/**
 * drawGraph draws graph g and returns {el, update(state), select(name)}. state is
 * {steps: {name: {status, error}}, loops: {name: {done, failed, total}}, took: {name: ms},
 * fired: Set of "from\u0000to", exited: Set of step names}; onSelect(name) runs when a step
 * is clicked.
 */
export function drawGraph(g, onSelect) {
  const defs = svg('defs', {},
    ['idle', 'fired', 'not-taken', 'back'].map((k) => svg('marker', {id: 'arrow-' + k, viewBox: '0 0 10 10', refX: '9', refY: '5',
      markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse', class: 'arrow ' + k}, svg('path', {d: 'M0,0 L10,5 L0,10 z'}))));
  const edges = svg('g', {class: 'edges'});
  const labels = svg('g', {class: 'labels'});
  const nodes = svg('g', {class: 'nodes'});
  const root = svg('svg', {class: 'graph', viewBox: `0 0 ${g.width} ${g.height}`, width: g.width, height: g.height, role: 'img',
    'aria-label': `Step graph of ${g.path}: ${g.nodes.length} steps, ${g.edges.length} arcs`}, defs, edges, labels, nodes);

  const edgeEls = g.edges.map((e) => {
    const title = svg('title', {}, `${e.from} → ${e.to}${e.when ? '\nwhen ' + e.when : ''}${e.back ? '\n(back to an earlier step)' : ''}`);
    const line = svg('path', {class: 'edge-line', d: e.d, 'marker-end': `url(#arrow-${e.back || e.self ? 'back' : 'idle'})`});
    const el = svg('g', {class: ['edge', (e.back || e.self) && 'back'], dataset: {from: e.from, to: e.to, state: 'idle'}}, title, line);
    edges.append(el);
    let label = null;
    if (e.label_box && e.label) {
      const b = e.label_box;
      label = svg('g', {class: 'edge-label', dataset: {from: e.from, to: e.to}},
        svg('title', {}, e.when || e.label),
        svg('rect', {x: b.x, y: b.y, width: b.w, height: b.h, rx: '4'}),
        svg('text', {x: b.x + 5, y: b.y + b.h / 2, 'dominant-baseline': 'central'}, e.label));
      labels.append(label);
    }
    return {e, el, line, label};
  });

  const nodeEls = new Map();
  for (const n of g.nodes) {
    const b = n.box;
    const title = svg('title', {});
    const glyph = svg('text', {class: 'node-glyph', x: 18, y: b.h / 2, 'text-anchor': 'middle', 'dominant-baseline': 'central', 'aria-hidden': 'true'}, GLYPH.pending);
    const name = svg('text', {class: 'node-name', x: 34, y: 18, 'dominant-baseline': 'central'}, n.label);
    const sub = svg('text', {class: 'node-sub', x: 34, y: 34, 'dominant-baseline': 'central'}, n.kind);
    const bar = n.loop ? svg('rect', {class: 'loop-bar', x: 1, y: b.h - 4, width: 0, height: 3, rx: '1.5'}) : null;
    const el = svg('g', {class: 'node s-pending', transform: `translate(${b.x},${b.y})`, tabindex: '0', role: 'button',
      dataset: {step: n.name, status: 'pending'}, 'aria-label': `${n.name}: pending`},
    title,
    svg('rect', {class: 'node-box', width: b.w, height: b.h, rx: '8'}),
    n.loop ? svg('rect', {class: 'loop-track', x: 1, y: b.h - 4, width: b.w - 2, height: 3, rx: '1.5'}) : null,
    bar,
    svg('circle', {class: 'node-mark', cx: 18, cy: b.h / 2, r: 9}),
    glyph, name, sub);
    el.addEventListener('click', () => onSelect && onSelect(n.name));
    el.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); onSelect && onSelect(n.name); } });
    nodes.append(el);
    nodeEls.set(n.name, {n, el, title, glyph, name, sub, bar});
  }

  function update(state) {
    for (const {n, el, title, glyph, sub, bar} of nodeEls.values()) {
      const st = state.steps[n.name] || {};
      const status = st.status || 'pending';
      el.setAttribute('class', `node s-${status}${el.classList.contains('selected') ? ' selected' : ''}`);
      el.dataset.status = status;
      el.setAttribute('aria-label', `${n.name}: ${status}`);
      glyph.textContent = GLYPH[status];
      const parts = [n.kind];
      const loop = state.loops[n.name];
      if (st.reused) {
        parts.push('reused');
        if (bar) bar.setAttribute('width', '0');
      } else if (n.loop) {
        const total = loop ? loop.total : 0;
        const done = loop ? loop.done : 0;
        parts.push(`loop ${compact(done)}/${total ? compact(total) : '?'}`);
        el.dataset.loopDone = done;
        el.dataset.loopTotal = total;
        if (bar) bar.setAttribute('width', String(total ? (n.box.w - 2) * Math.min(1, done / total) : 0));
      } else if (state.took[n.name] !== undefined) {
        parts.push(short(state.took[n.name]));
      }
      el.classList.toggle('reused', !!st.reused);
      el.dataset.reused = st.reused ? 'true' : 'false';
      sub.textContent = parts.join(' · ');
      const lines = [`${n.name} — ${status}`];
      if (n.desc) lines.push(n.desc);
      if (n.loop) lines.push(`loop (${n.loop.mode}) over ${n.loop.in || 'a list'} as ${n.loop.iterator}${loop ? `: ${loop.done} of ${loop.total} done${loop.failed ? ', ' + loop.failed + ' failed' : ''}` : ''}`);
      if (st.reused) lines.push('result reused from the execution this one reruns');
      if (st.error && st.error.message) lines.push('error: ' + st.error.message);
      lines.push(`line ${n.line}`);
      title.textContent = lines.join('\n');
    }
    for (const {e, el, line, label} of edgeEls) {
      let s = 'idle';
      if (state.fired.has(e.from + '\u0000' + e.to)) s = 'fired';
      else if (state.exited.has(e.from) || (state.steps[e.from] || {}).status === 'skipped') s = 'not-taken';
      el.dataset.state = s;
      el.classList.toggle('fired', s === 'fired');
      el.classList.toggle('not-taken', s === 'not-taken');
      line.setAttribute('marker-end', `url(#arrow-${s === 'idle' && (e.back || e.self) ? 'back' : s})`);
      if (label) label.dataset.state = s;
    }
  }

  function select(name) {
    for (const {n, el} of nodeEls.values()) el.classList.toggle('selected', n.name === name);
  }

  // Names are drawn in a monospace font whose width the layout assumed; squeeze a text
  // that a different font made wider than its box.
  requestAnimationFrame(() => {
    for (const {n, name, sub} of nodeEls.values()) {
      for (const t of [name, sub]) {
        const room = n.box.w - 34 - 8;
        if (t.getComputedTextLength && t.getComputedTextLength() > room) {
          t.setAttribute('textLength', String(room));
          t.setAttribute('lengthAdjust', 'spacingAndGlyphs');
        }
      }
    }
  });

  return {el: root, update, select};
}

/** zoomable wraps a drawing of natural width w in a scroller with zoom buttons. */
export function zoomable(el, w, h0) {
  const scroller = h('div', {class: 'graph-scroll'}, el);
  let z = 1;
  const label = h('span', {class: 'zoom-level muted'}, '100%');
  const set = (v) => {
    z = Math.max(0.3, Math.min(2, v));
    el.setAttribute('width', String(Math.round(w * z)));
    el.setAttribute('height', String(Math.round(h0 * z)));
    label.textContent = Math.round(z * 100) + '%';
  };
  const fit = () => {
    const room = scroller.clientWidth - 2;
    set(room > 0 && w > room ? Math.max(0.5, room / w) : 1);
  };
  const bar = h('div', {class: 'zoom'},
    h('button', {type: 'button', class: 'btn small', title: 'Zoom out', 'aria-label': 'Zoom out', onclick: () => set(z / 1.25)}, '−'),
    label,
    h('button', {type: 'button', class: 'btn small', title: 'Zoom in', 'aria-label': 'Zoom in', onclick: () => set(z * 1.25)}, '+'),
    h('button', {type: 'button', class: 'btn small', onclick: fit}, 'Fit'),
    h('button', {type: 'button', class: 'btn small', onclick: () => set(1)}, '100%'));
  requestAnimationFrame(fit);
  return {bar, scroller};
}
