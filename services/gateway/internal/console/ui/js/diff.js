// A line diff (Myers' O(ND) algorithm) shown as unified hunks with three lines of context.

import {h} from './dom.js';

/** diffLines returns the edit script from a to b: [op, line] with op ' ', '-' or '+'. */
export function diffLines(a, b) {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const v = new Int32Array(2 * max + 2);
  const trace = [];
  let found = false;
  for (let d = 0; d <= max && !found; d++) {
    trace.push(v.slice());
    for (let k = -d; k <= d; k += 2) {
      let x;
      if (k === -d || (k !== d && v[max + k - 1] < v[max + k + 1])) x = v[max + k + 1];
      else x = v[max + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) { x++; y++; }
      v[max + k] = x;
      if (x >= n && y >= m) { found = true; break; }
    }
  }
  // Walk the trace back from the end.
  const out = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0 && (x > 0 || y > 0); d--) {
    const vv = trace[d];
    const k = x - y;
    let prevK;
    if (k === -d || (k !== d && vv[max + k - 1] < vv[max + k + 1])) prevK = k + 1;
    else prevK = k - 1;
    const px = d === 0 ? 0 : vv[max + prevK];
    const py = px - prevK;
    while (x > px && y > py) { out.push([' ', a[x - 1]]); x--; y--; }
    if (d > 0) {
      if (x === px) { out.push(['+', b[y - 1]]); y--; } else { out.push(['-', a[x - 1]]); x--; }
    }
  }
  while (x > 0 && y > 0) { out.push([' ', a[x - 1]]); x--; y--; }
  return out.reverse();
}

/** diffView renders the diff of texts a (version va) and b (version vb). */
export function diffView(a, b, va, vb) {
  const ops = diffLines(a.replace(/\n$/, '').split('\n'), b.replace(/\n$/, '').split('\n'));
  const adds = ops.filter((o) => o[0] === '+').length;
  const dels = ops.filter((o) => o[0] === '-').length;
  if (!adds && !dels) return h('p', {class: 'muted'}, `Versions ${va} and ${vb} are the same.`);
  // Number the lines on both sides, then keep the changes with three lines around each.
  let la = 0;
  let lb = 0;
  const numbered = ops.map(([op, text]) => {
    if (op !== '+') la++;
    if (op !== '-') lb++;
    return {op, text, la: op === '+' ? '' : la, lb: op === '-' ? '' : lb};
  });
  const keep = new Array(numbered.length).fill(false);
  numbered.forEach((r, i) => {
    if (r.op === ' ') return;
    for (let j = Math.max(0, i - 3); j <= Math.min(numbered.length - 1, i + 3); j++) keep[j] = true;
  });
  const rows = [];
  let gap = false;
  numbered.forEach((r, i) => {
    if (!keep[i]) { gap = true; return; }
    if (gap && rows.length) rows.push(h('div', {class: 'diff-gap'}, '⋯'));
    gap = false;
    rows.push(h('div', {class: ['diff-line', r.op === '+' ? 'add' : r.op === '-' ? 'del' : 'ctx']},
      h('span', {class: 'ln'}, String(r.la)), h('span', {class: 'ln'}, String(r.lb)),
      h('span', {class: 'op', 'aria-hidden': 'true'}, r.op), h('span', {class: 'lc'}, r.text || '\u200b')));
  });
  return h('div', {},
    h('p', {class: 'diff-stat'}, h('span', {class: 'add-count'}, `+${adds}`), ' ', h('span', {class: 'del-count'}, `−${dels}`),
      h('span', {class: 'muted'}, ` lines from version ${va} to version ${vb}`)),
    h('div', {class: 'code diff', role: 'region', 'aria-label': `Diff from version ${va} to ${vb}`}, rows));
}
