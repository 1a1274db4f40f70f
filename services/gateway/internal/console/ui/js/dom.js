// DOM and formatting helpers. Everything the console shows is built with h() and svg():
// text goes in as text nodes, never as HTML, so API data cannot inject markup.

const SVG_NS = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'value' && 'value' in el) el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** h('div', {class: 'x'}, 'text', child) builds an HTML element. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** svg('rect', {x: 1}) builds an SVG element. */
export function svg(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** mount replaces el's children. */
export function mount(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// Statuses: the API's enum names to the console's words. Every status is shown with a
// glyph and its word, never by colour alone.
const EXEC = {
  EXECUTION_STATUS_RUNNING: 'running',
  EXECUTION_STATUS_COMPLETED: 'completed',
  EXECUTION_STATUS_FAILED: 'failed',
  EXECUTION_STATUS_CANCELLED: 'cancelled',
};
const STEP = {
  STEP_STATUS_RUNNING: 'running',
  STEP_STATUS_COMPLETED: 'completed',
  STEP_STATUS_FAILED: 'failed',
  STEP_STATUS_SKIPPED: 'skipped',
};
export const GLYPH = {
  pending: '○', running: '◔', completed: '✓', failed: '✕', skipped: '⤼', cancelled: '■', unknown: '?',
  active: '▶', paused: '❚❚',
};

export function execStatus(s) { return EXEC[s] || 'unknown'; }
export function stepStatus(s) { return STEP[s] || 'pending'; }
export const EXEC_ENUM = Object.fromEntries(Object.entries(EXEC).map(([k, v]) => [v, k]));

/** badge is a status chip: glyph and word. */
export function badge(status, extra) {
  return h('span', {class: ['badge', 's-' + status], title: status},
    h('span', {class: 'glyph', 'aria-hidden': 'true'}, GLYPH[status] || '?'), status, extra ? ' ' + extra : '');
}

export function ms(ts) { return ts ? Date.parse(ts) : NaN; }

/** duration formats milliseconds as 850 ms, 12.4 s, 3 m 05 s, 2 h 10 m. */
export function duration(d) {
  if (!Number.isFinite(d) || d < 0) return '—';
  if (d < 1000) return Math.round(d) + ' ms';
  if (d < 60_000) return (d / 1000).toFixed(d < 10_000 ? 2 : 1) + ' s';
  const s = Math.round(d / 1000);
  if (s < 3600) return Math.floor(s / 60) + ' m ' + String(s % 60).padStart(2, '0') + ' s';
  return Math.floor(s / 3600) + ' h ' + String(Math.floor(s / 60) % 60).padStart(2, '0') + ' m';
}

/** short formats a compact duration for tight spaces: 850ms, 12.4s, 3m05s. */
export function short(d) {
  if (!Number.isFinite(d) || d < 0) return '';
  if (d < 1000) return Math.round(d) + 'ms';
  if (d < 60_000) return (d / 1000).toFixed(1) + 's';
  const s = Math.round(d / 1000);
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s / 60) % 60).padStart(2, '0') + 'm';
}

const dtf = new Intl.DateTimeFormat(undefined, {year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit'});
const tf = new Intl.DateTimeFormat(undefined, {hour: '2-digit', minute: '2-digit', second: '2-digit'});

/** when formats a timestamp: the time alone today, the date and time otherwise. */
export function when(ts) {
  const t = ms(ts);
  if (!Number.isFinite(t)) return '—';
  const d = new Date(t);
  return d.toDateString() === new Date().toDateString() ? tf.format(d) : dtf.format(d);
}

export function fullTime(ts) {
  const t = ms(ts);
  return Number.isFinite(t) ? new Date(t).toISOString() : '';
}

/** ago formats a timestamp relative to now: 5 s ago, 3 min ago, 2 h ago, 4 d ago. */
export function ago(ts) {
  const d = Date.now() - ms(ts);
  if (!Number.isFinite(d)) return '';
  if (d < 60_000) return Math.max(0, Math.round(d / 1000)) + ' s ago';
  if (d < 3_600_000) return Math.round(d / 60_000) + ' min ago';
  if (d < 86_400_000) return Math.round(d / 3_600_000) + ' h ago';
  return Math.round(d / 86_400_000) + ' d ago';
}

export function bytes(n) {
  n = Number(n);
  if (!Number.isFinite(n)) return '';
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

export function count(n) { return Number(n).toLocaleString(); }

/** compact formats a count in at most five characters: 999, 1.2k, 45k, 1.2M. */
export function compact(n) {
  if (n < 1000) return String(n);
  if (n < 10_000) return (n / 1000).toFixed(1).replace(/\.0$/, '') + 'k';
  if (n < 1_000_000) return Math.round(n / 1000) + 'k';
  return (n / 1_000_000).toFixed(1).replace(/\.0$/, '') + 'M';
}

/** copyButton copies text to the clipboard. */
export function copyButton(text, label = 'Copy') {
  const b = h('button', {class: 'btn ghost small', type: 'button', title: 'Copy to the clipboard'}, label);
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = 'Copied';
    } catch {
      b.textContent = 'Copy failed';
    }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

/** download saves data (text or a Blob) as a file. */
export function download(name, data, type) {
  const url = URL.createObjectURL(data instanceof Blob ? data : new Blob([data], {type}));
  const a = h('a', {href: url, download: name, class: 'hidden'});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** throttle calls fn at most once per wait ms, the last call winning. */
export function throttle(fn, wait) {
  let timer = null;
  let last = 0;
  return (...args) => {
    const run = () => { timer = null; last = Date.now(); fn(...args); };
    clearTimeout(timer);
    const left = wait - (Date.now() - last);
    if (left <= 0) run();
    else timer = setTimeout(run, left);
  };
}

/** tabs builds a tab bar; onPick(id) runs when a tab is chosen. */
export function tabs(items, active, onPick) {
  const nav = h('nav', {class: 'tabs', role: 'tablist'}, items.map(([id, label]) =>
    h('button', {type: 'button', role: 'tab', class: ['tab', id === active && 'active'], 'aria-selected': String(id === active), dataset: {tab: id},
      onclick: () => nav.onPick(id)}, label)));
  nav.onPick = onPick;
  return nav;
}

/**
 * tabsIn draws tabs into el. When el already holds the same tabs, in the same order, it
 * keeps their buttons and changes only their labels, which one is active and what a pick
 * does: a live page redraws its tabs on every update, and a button replaced between a
 * press and its release would lose the click.
 */
export function tabsIn(el, items, active, onPick) {
  const nav = el.firstElementChild;
  const buttons = nav && nav.matches('nav.tabs') ? [...nav.children] : [];
  if (buttons.length !== items.length || buttons.some((b, i) => b.dataset.tab !== items[i][0])) {
    mount(el, tabs(items, active, onPick));
    return;
  }
  nav.onPick = onPick;
  items.forEach(([id, label], i) => {
    const b = buttons[i];
    if (b.textContent !== label) b.textContent = label;
    b.classList.toggle('active', id === active);
    b.setAttribute('aria-selected', String(id === active));
  });
}

/** empty is the message of a list with nothing in it. */
export function empty(title, hint) {
  return h('div', {class: 'empty'}, h('p', {class: 'empty-title'}, title), hint ? h('p', {class: 'muted'}, hint) : null);
}

export function spinner(text = 'Loading…') {
  return h('div', {class: 'loading', role: 'status'}, h('span', {class: 'spin', 'aria-hidden': 'true'}), text);
}
