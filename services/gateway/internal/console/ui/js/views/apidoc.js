// API: the routes of the gateway's OpenAPI document (/openapi.json), by service, each
// opening to its parameters, request body and response fields.

import {h, mount, spinner} from '../dom.js';
import {api} from '../api.js';
import {errorBox} from '../ui.js';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'];

export async function render(root) {
  mount(root, spinner('Reading /openapi.json…'));
  let doc;
  try {
    doc = await api('/openapi.json');
  } catch (e) {
    mount(root, errorBox(e, 'the OpenAPI document could not be read'));
    return;
  }
  const defs = doc.definitions || {};
  const groups = new Map();
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const m of METHODS) {
      const op = item[m];
      if (!op) continue;
      const tag = (op.tags && op.tags[0]) || 'Other';
      if (!groups.has(tag)) groups.set(tag, []);
      groups.get(tag).push({method: m, path, op});
    }
  }
  const tagDesc = Object.fromEntries((doc.tags || []).map((t) => [t.name, t.description]));
  const info = doc.info || {};
  const security = doc.securityDefinitions ? Object.entries(doc.securityDefinitions).map(([k, v]) => `${k}: ${v.type}${v.in ? ' in ' + v.in : ''}${v.name ? ' ' + v.name : ''}`).join('; ') : '';
  const total = [...groups.values()].reduce((n, g) => n + g.length, 0);
  mount(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'API'), h('span', {class: 'muted'}, `${info.title || ''}${info.version ? ' · ' + info.version : ''} · ${total} routes`),
      h('div', {class: 'spacer'}), h('a', {class: 'btn', href: '/openapi.json', target: '_blank', rel: 'noopener'}, 'openapi.json')),
    h('p', {class: 'lead'}, 'Every call takes ', h('code', {}, 'Authorization: Bearer <API key or JWT>'), security ? ` (${security})` : '',
      '. Errors are ', h('code', {}, '{code, message, details}'), '; the message names the field, step or line at fault.'),
    h('div', {class: 'api', id: 'api'}, [...groups.entries()].map(([tag, ops]) => h('section', {class: 'card api-group'},
      h('h2', {class: 'card-title'}, tag),
      tagDesc[tag] ? h('p', {class: 'muted'}, tagDesc[tag]) : null,
      ops.map(({method, path, op}) => route(method, path, op, defs))))));
}

function route(method, path, op, defs) {
  const params = (op.parameters || []).filter((p) => p.in !== 'body');
  const body = (op.parameters || []).find((p) => p.in === 'body');
  const ok = op.responses && op.responses['200'];
  // The summary line is the comment's first sentence; the whole comment opens below it.
  const full = [op.summary, op.description].filter(Boolean).join('\n\n');
  const sum = firstSentence(full);
  const desc = full !== sum ? full : '';
  return h('details', {class: 'api-route', dataset: {method, path}},
    h('summary', {}, h('span', {class: ['method', 'm-' + method]}, method.toUpperCase()), h('code', {class: 'api-path'}, path), h('span', {class: 'api-sum'}, sum)),
    h('div', {class: 'api-body'},
      desc ? h('p', {class: 'pre'}, desc) : null,
      params.length ? h('div', {}, h('h4', {}, 'Parameters'), h('table', {class: 'table compact'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'In'), h('th', {}, 'Type'), h('th', {}, 'Description'))),
        h('tbody', {}, params.map((p) => h('tr', {},
          h('td', {class: 'mono'}, p.name, p.required ? h('span', {class: 'req', title: 'required'}, ' *') : ''),
          h('td', {}, p.in), h('td', {class: 'mono'}, typeOf(p)), h('td', {class: 'pre'}, firstPara(p.description)))))))
        : null,
      body ? schema('Request body', body.schema, defs) : null,
      // A route answering a file or an event stream says what it sends, not JSON fields.
      ok && op.produces ? h('div', {class: 'api-raw'}, h('h4', {}, 'Response', h('span', {class: 'muted'}, ' ' + op.produces.join(' or '))), h('p', {}, ok.description))
        : ok ? schema('Response', ok.schema, defs) : null));
}

function firstSentence(s) {
  const t = String(s || '').replace(/\s+/g, ' ').trim();
  const m = /^.*?[.:](\s|$)/.exec(t);
  return m ? m[0].trim().replace(/:$/, '.') : t;
}

function firstPara(s) { return String(s || '').split('\n\n')[0]; }

function typeOf(p) {
  if (!p) return '';
  if (p.$ref) return refName(p.$ref);
  if (p.type === 'array') return typeOf(p.items) + '[]';
  if (p.enum) return 'enum';
  return [p.type, p.format].filter(Boolean).join(' ');
}

function refName(ref) { return String(ref).split('/').pop().replace(/^noetlApiV1/, '').replace(/^noetl(Event|Api)V1/, ''); }

function resolve(s, defs) {
  if (s && s.$ref) return defs[String(s.$ref).split('/').pop()] || {};
  return s || {};
}

function schema(title, s, defs) {
  const d = resolve(s, defs);
  const props = Object.entries(d.properties || {});
  return h('div', {}, h('h4', {}, title, s && s.$ref ? h('span', {class: 'muted'}, ' ' + refName(s.$ref)) : ''),
    props.length ? h('table', {class: 'table compact'},
      h('tbody', {}, props.map(([k, v]) => h('tr', {},
        h('td', {class: 'mono'}, k), h('td', {class: 'mono'}, typeOf(v)), h('td', {class: 'pre'}, firstPara(v.description || v.title)))))) : h('p', {class: 'muted'}, 'No fields.'));
}
