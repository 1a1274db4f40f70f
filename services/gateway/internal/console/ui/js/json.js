// A collapsible JSON tree built of <details> elements.

import {h, copyButton} from './dom.js';

const MAX_ITEMS = 200;

function leaf(v) {
  if (v === null) return h('span', {class: 'j-null'}, 'null');
  switch (typeof v) {
    case 'string': return h('span', {class: 'j-str'}, JSON.stringify(v));
    case 'number': return h('span', {class: 'j-num'}, String(v));
    case 'boolean': return h('span', {class: 'j-bool'}, String(v));
    default: return h('span', {}, String(v));
  }
}

function node(key, v, depth, open) {
  const k = key === null ? null : h('span', {class: 'j-key'}, typeof key === 'number' ? key : JSON.stringify(key), ': ');
  if (v === null || typeof v !== 'object') return h('li', {}, k, leaf(v));
  const arr = Array.isArray(v);
  const entries = arr ? v.map((x, i) => [i, x]) : Object.entries(v);
  const sum = arr ? `[${entries.length}]` : `{${entries.length}}`;
  if (!entries.length) return h('li', {}, k, h('span', {class: 'j-punct'}, arr ? '[]' : '{}'));
  const kids = entries.slice(0, MAX_ITEMS).map(([kk, vv]) => node(kk, vv, depth + 1, open));
  if (entries.length > MAX_ITEMS) kids.push(h('li', {class: 'muted'}, `… ${entries.length - MAX_ITEMS} more`));
  return h('li', {},
    h('details', {open: depth < open},
      h('summary', {}, k, h('span', {class: 'j-punct'}, sum)),
      h('ul', {class: 'j-list'}, kids)));
}

/** jsonTree shows value as a tree, open to depth open, with a copy button. */
export function jsonTree(value, open = 2) {
  return h('div', {class: 'json'},
    h('div', {class: 'json-tools'}, copyButton(JSON.stringify(value, null, 2), 'Copy JSON')),
    h('ul', {class: 'j-list j-root'}, node(null, value, 0, open)));
}
