// Shared pieces of the console's pages: the error box, the pager, the confirm dialog.

import {h} from './dom.js';
import {ApiError} from './api.js';

const TITLES = {
  INVALID_ARGUMENT: 'Invalid request', NOT_FOUND: 'Not found', ALREADY_EXISTS: 'Already exists',
  PERMISSION_DENIED: 'Not permitted', UNAUTHENTICATED: 'Not signed in', RESOURCE_EXHAUSTED: 'Limit reached',
  FAILED_PRECONDITION: 'Not possible now', UNAVAILABLE: 'Unavailable', INTERNAL: 'Internal error',
  DEADLINE_EXCEEDED: 'Timed out', ABORTED: 'Aborted', OUT_OF_RANGE: 'Out of range', UNIMPLEMENTED: 'Not implemented',
};

/** errorBox shows an error as the API worded it, with its details and code. */
export function errorBox(err, what) {
  const api = err instanceof ApiError;
  const title = (api && TITLES[err.code]) || 'Something went wrong';
  const meta = api ? [err.code, err.httpStatus ? 'HTTP ' + err.httpStatus : ''].filter(Boolean).join(' · ') : '';
  const notes = api ? err.notes() : [];
  return h('div', {class: 'alert error', role: 'alert', dataset: {code: api ? err.code : ''}},
    h('div', {class: 'alert-head'},
      h('strong', {}, what ? `${title} — ${what}` : title),
      meta ? h('span', {class: 'alert-meta'}, meta) : null),
    h('p', {class: 'alert-msg'}, err.message || String(err)),
    notes.length ? h('ul', {class: 'alert-notes'}, notes.map((n) => h('li', {}, n))) : null);
}

/** notice is a calm informational line. */
export function notice(text, kind = 'info') {
  return h('div', {class: ['alert', kind]}, h('p', {class: 'alert-msg'}, text));
}

/**
 * Pager pages a list the API pages with tokens: it keeps the tokens of the pages before,
 * so Newer goes back and Older follows next_page_token.
 */
export class Pager {
  constructor(onChange) {
    this.tokens = [''];
    this.next = '';
    this.onChange = onChange;
  }
  get token() { return this.tokens[this.tokens.length - 1]; }
  get page() { return this.tokens.length; }
  reset() { this.tokens = ['']; this.next = ''; }
  view(label = 'page') {
    if (this.tokens.length <= 1 && !this.next) return null; // one page: nothing to page
    return h('div', {class: 'pager'},
      h('button', {type: 'button', class: 'btn', disabled: this.tokens.length <= 1, dataset: {pager: 'prev'},
        onclick: () => { this.tokens.pop(); this.onChange(); }}, '← Newer'),
      h('span', {class: 'muted'}, `${label} ${this.page}`),
      h('button', {type: 'button', class: 'btn', disabled: !this.next, dataset: {pager: 'next'},
        onclick: () => { this.tokens.push(this.next); this.onChange(); }}, 'Older →'));
  }
}

/**
 * confirmDialog asks before an action. It resolves to the value of its field (a text
 * input with the reason placeholder, or the element given as field), or null when the user
 * backs out.
 */
export function confirmDialog({title, body, action, danger, reason, field}) {
  return new Promise((resolve) => {
    const input = field || (reason ? h('input', {type: 'text', class: 'input', placeholder: reason, 'aria-label': reason, maxlength: '500'}) : null);
    const close = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    const dlg = h('dialog', {class: 'dialog', 'aria-label': title},
      h('form', {method: 'dialog', onsubmit: (e) => { e.preventDefault(); close(input ? input.value : ''); }},
        h('h2', {}, title),
        h('p', {}, body),
        field ? h('label', {class: 'label', for: field.id}, field.getAttribute('aria-label') || '') : null,
        input,
        h('div', {class: 'dialog-actions'},
          h('button', {type: 'button', class: 'btn', onclick: () => close(null)}, 'Keep it'),
          h('button', {type: 'submit', class: ['btn', danger ? 'danger' : 'primary'], dataset: {confirm: '1'}}, action))));
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); close(null); });
    document.body.append(dlg);
    dlg.showModal();
    (input || dlg.querySelector('[data-confirm]')).focus();
  });
}

/** section is a titled card. */
export function card(title, ...body) {
  return h('section', {class: 'card'}, title ? h('h2', {class: 'card-title'}, title) : null, ...body);
}

/** parseLabels reads "k=v, k2=v2" into an object, or throws naming the item at fault. */
export function parseLabels(text) {
  const out = {};
  for (const item of String(text || '').split(',').map((x) => x.trim()).filter(Boolean)) {
    const i = item.indexOf('=');
    if (i <= 0) throw new Error(`labels: "${item}" is not key=value`);
    out[item.slice(0, i).trim()] = item.slice(i + 1).trim();
  }
  return out;
}

/** labelText writes labels as "k=v, k2=v2". */
export function labelText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(', ');
}

/** labelChips shows labels as chips, at most max of them and a count of the rest. */
export function labelChips(labels, max = 4) {
  const all = Object.entries(labels || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!all.length) return null;
  return h('span', {class: 'labels'}, all.slice(0, max).map(([k, v]) => h('span', {class: 'label-chip', title: `${k}=${v}`}, h('span', {class: 'lk'}, k), '=', v)),
    all.length > max ? h('span', {class: 'muted small', title: labelText(labels)}, `+${all.length - max}`) : null);
}
