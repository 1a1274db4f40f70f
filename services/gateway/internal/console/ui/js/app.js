// The console's shell: the top bar, sign-in state and the hash router. Each page is a
// module with render(root, route, app) that may return a function ending its work (live
// watches, timers) when the page is left.

import {h, mount} from './dom.js';
import {auth, probe, whenUnauthenticated} from './api.js';
import {errorBox} from './ui.js';
import * as login from './views/login.js';
import * as executions from './views/executions.js';
import * as execution from './views/execution.js';
import * as catalog from './views/catalog.js';
import * as credentials from './views/credentials.js';
import * as schedules from './views/schedules.js';
import * as triggers from './views/triggers.js';
import * as apidoc from './views/apidoc.js';

const NAV = [
  ['executions', 'Executions'],
  ['catalog', 'Catalog'],
  ['schedules', 'Schedules'],
  ['triggers', 'Triggers'],
  ['credentials', 'Credentials'],
  ['api', 'API'],
];

/** parse reads a hash such as #/executions/ID?tab=graph into its parts. */
export function parse(hash) {
  const raw = (hash || '').replace(/^#\/?/, '');
  const [p, q] = raw.split('?');
  const parts = (p || '').split('/').filter(Boolean).map(decodeURIComponent);
  return {parts, query: new URLSearchParams(q || ''), hash: '#/' + raw};
}

/** link builds a hash for parts and query values (empty values left out). */
export function link(parts, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return '#/' + parts.map((x) => encodeURIComponent(x).replace(/%2F/g, '/')).join('/') + (s ? '?' + s : '');
}

const app = {
  go(hash) { if (location.hash !== hash) location.hash = hash; else render(); },
  /** replace changes the hash without a new history entry and without re-rendering. */
  replace(hash) { history.replaceState(null, '', hash); current = parse(hash); },
  link,
  signOut() { auth.clear(); app.go('#/login'); },
};

let current = null;
let stop = null;
let afterLogin = '#/executions';

function shell() {
  const section = current.parts[0] || 'executions';
  const who = auth.open()
    ? h('span', {class: 'pill warn', title: 'The gateway runs with NOETL_GATEWAY_INSECURE: every caller is an admin'}, 'authentication off')
    : h('span', {class: 'pill', title: 'The key is kept for this tab only'}, keyLabel(auth.token()));
  return h('header', {class: 'top'},
    h('a', {class: 'brand', href: '#/executions', 'aria-label': 'NoETL console'},
      h('img', {src: 'favicon.svg', alt: '', width: '22', height: '22'}), h('span', {}, 'NoETL')),
    h('nav', {class: 'nav', 'aria-label': 'Sections'},
      NAV.map(([id, label]) => h('a', {href: '#/' + id, class: ['nav-link', section === id && 'active'], 'aria-current': section === id ? 'page' : false}, label))),
    h('div', {class: 'who'}, who,
      h('button', {type: 'button', class: 'btn ghost small', onclick: () => app.signOut()}, auth.open() ? 'Use a key' : 'Sign out')));
}

/** keyLabel names a credential without its secret: an API key's id, or "JWT". */
function keyLabel(token) {
  const m = /^(noetl_[A-Za-z0-9]+)_/.exec(token);
  if (m) return 'key ' + m[1];
  if (token.split('.').length === 3) return 'JWT';
  return 'signed in';
}

async function render() {
  current = parse(location.hash);
  if (stop) { try { stop(); } catch { /* a page's cleanup must not block the next one */ } stop = null; }
  const root = document.getElementById('app');
  const section = current.parts[0] || '';
  if (section !== 'login' && !auth.signedIn()) {
    // Without a key, find out whether the gateway asks for one at all.
    const open = await probe('/v1/executions?pageSize=1').catch(() => ({ok: false}));
    if (open.ok) auth.setOpen();
    else { afterLogin = current.hash === '#/' ? '#/executions' : current.hash; app.go('#/login'); return; }
  }
  if (section === 'login') {
    mount(root, h('main', {id: 'view', class: 'view login-view'}));
    stop = login.render(root.querySelector('#view'), current, {...app, done: () => app.go(afterLogin)}) || null;
    return;
  }
  const view = h('main', {id: 'view', class: 'view'});
  mount(root, shell(), view);
  try {
    let page;
    switch (section) {
      case '':
      case 'executions':
        page = current.parts.length > 1 ? execution : executions;
        break;
      case 'catalog': page = catalog; break;
      case 'schedules': page = schedules; break;
      case 'triggers': page = triggers; break;
      case 'credentials': page = credentials; break;
      case 'api': page = apidoc; break;
      default:
        mount(view, h('h1', {}, 'Not found'), h('p', {}, 'There is no page ', h('code', {}, current.hash), '. ', h('a', {href: '#/executions'}, 'Go to the executions.')));
        return;
    }
    document.title = `${NAV.find(([id]) => id === (section || 'executions'))?.[1] || 'NoETL'} · NoETL`;
    stop = (await page.render(view, current, app)) || null;
  } catch (e) {
    mount(view, errorBox(e));
  }
}

whenUnauthenticated((err) => {
  if (auth.open()) return;
  afterLogin = current ? current.hash : '#/executions';
  login.refused(err);
  auth.clear();
  app.go('#/login');
});

window.addEventListener('hashchange', render);
window.addEventListener('unhandledrejection', (e) => {
  if (e.reason && e.reason.name === 'AbortError') { e.preventDefault(); return; }
  const view = document.getElementById('view');
  if (view) view.prepend(errorBox(e.reason || new Error('unexpected error')));
});
if (!location.hash) history.replaceState(null, '', '#/executions');
render();
