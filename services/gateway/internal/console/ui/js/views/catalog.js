// Catalog: the playbooks (latest version of each path), and for one playbook its versions,
// its source, its step graph, a diff between two versions and a form to start a run.

import {h, mount, when, fullTime, tabs, spinner, empty, count} from '../dom.js';
import {api} from '../api.js';
import {errorBox, Pager, notice, card, parseLabels} from '../ui.js';
import {highlight} from '../yaml.js';
import {diffView} from '../diff.js';
import {drawGraph, zoomable} from '../graph.js';
import {jsonError} from '../jsoncheck.js';

export async function render(root, route, app) {
  if (route.parts.length > 1) return playbook(root, route, app);
  return list(root, route, app);
}

async function list(root, route, app) {
  const controller = new AbortController();
  const body = h('div', {}, spinner());
  const filter = h('input', {type: 'search', class: 'input', placeholder: 'Filter this page by path or name', 'aria-label': 'Filter playbooks'});
  const pager = new Pager(() => load());
  let items = [];
  mount(root, h('div', {class: 'page-head'}, h('h1', {}, 'Catalog'), h('span', {class: 'muted'}, 'Playbooks, the latest version of each path')),
    h('div', {class: 'filters'}, h('label', {class: 'field grow'}, h('span', {class: 'label'}, 'Find'), filter)), body);
  filter.addEventListener('input', draw);

  async function load() {
    mount(body, spinner());
    try {
      const r = await api('/v1/playbooks', {query: {pageSize: 100, pageToken: pager.token}, signal: controller.signal});
      items = r.playbooks || [];
      pager.next = r.nextPageToken || '';
      draw();
    } catch (e) {
      if (e.name !== 'AbortError') mount(body, errorBox(e, 'the catalog could not be listed'));
    }
  }

  function draw() {
    const f = filter.value.trim().toLowerCase();
    const shown = f ? items.filter((p) => p.path.toLowerCase().includes(f) || (p.name || '').toLowerCase().includes(f)) : items;
    if (!items.length) {
      mount(body, empty('The catalog is empty.', 'Register a playbook with noetl register FILE.yaml, or POST /v1/playbooks.'));
      return;
    }
    mount(body,
      h('div', {class: 'table-wrap'}, h('table', {class: 'table', id: 'playbooks'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Path'), h('th', {class: 'num'}, 'Version'), h('th', {}, 'Name'), h('th', {}, 'Description'), h('th', {}, 'Registered'))),
        h('tbody', {}, shown.map((p) => {
          const href = app.link(['catalog', ...p.path.split('/')]);
          return h('tr', {class: 'row-link', onclick: (e) => { if (!e.target.closest('a')) app.go(href); }, dataset: {path: p.path}},
            h('td', {class: 'mono'}, h('a', {href}, p.path)),
            h('td', {class: 'num'}, 'v' + p.version),
            h('td', {}, p.name || ''),
            h('td', {class: 'muted clip'}, p.description || ''),
            h('td', {title: fullTime(p.createTime)}, when(p.createTime)));
        })))),
      shown.length ? null : empty('No playbook on this page matches.'),
      pager.view());
  }

  await load();
  return () => controller.abort();
}

async function playbook(root, route, app) {
  const path = route.parts.slice(1).join('/');
  const controller = new AbortController();
  const signal = controller.signal;
  let tab = route.query.get('tab') || 'source';
  mount(root, spinner('Loading the playbook…'));
  let versions;
  try {
    versions = [];
    let token = '';
    do {
      const r = await api('/v1/playbooks', {query: {path, pageSize: 500, pageToken: token}, signal});
      versions.push(...(r.playbooks || []));
      token = r.nextPageToken || '';
    } while (token && versions.length < 5000);
  } catch (e) {
    if (e.name === 'AbortError') return;
    mount(root, crumbs(path), errorBox(e, 'the versions could not be listed'));
    return () => controller.abort();
  }
  if (!versions.length) {
    mount(root, crumbs(path), errorBox({message: `playbook ${path}: not found in the catalog`}));
    return () => controller.abort();
  }
  const latest = Number(versions[0].version);
  const version = Number(route.query.get('version')) || latest;
  const sources = new Map();
  const source = async (v) => {
    if (!sources.has(v)) {
      sources.set(v, api(`/v1/playbooks/${path.split('/').map(encodeURIComponent).join('/')}`, {query: {version: v}, signal}).then((r) => r.playbook));
    }
    return sources.get(v);
  };
  let pb;
  try {
    pb = await source(version);
  } catch (e) {
    if (e.name === 'AbortError') return;
    mount(root, crumbs(path), errorBox(e, `version ${version} could not be read`));
    return () => controller.abort();
  }
  document.title = `${path} · NoETL`;
  const go = (params) => app.go(app.link(['catalog', ...path.split('/')], {version, tab, ...params}));
  const versionSel = h('select', {class: 'input', id: 'version', 'aria-label': 'Version', onchange: () => go({version: versionSel.value})},
    versions.map((p) => h('option', {value: p.version, selected: Number(p.version) === version}, `v${p.version} · ${when(p.createTime)}${Number(p.version) === latest ? ' (latest)' : ''}`)));
  const body = h('div', {class: 'tab-body'});
  mount(root, crumbs(path),
    h('div', {class: 'page-head'}, h('h1', {class: 'mono'}, path), h('label', {class: 'field inline'}, h('span', {class: 'label'}, 'Version'), versionSel),
      h('div', {class: 'spacer'}),
      h('a', {class: 'btn', href: app.link(['executions'], {path})}, 'Its executions'),
      h('button', {type: 'button', class: 'btn primary', onclick: () => go({tab: 'run'})}, 'Start a run…')),
    h('p', {class: 'lead'}, h('strong', {}, pb.name || ''), pb.description ? ' — ' + pb.description : ''),
    (pb.warnings || []).length ? h('ul', {class: 'warnings'}, pb.warnings.map((w) => h('li', {}, w))) : null,
    tabs([['source', 'Source'], ['graph', 'Graph'], ['diff', 'Diff'], ['run', 'Run']], tab, (t) => go({tab: t})),
    body);

  switch (tab) {
    case 'graph': {
      mount(body, spinner());
      try {
        const g = await api('/ui/api/graph', {query: {path, version}, signal});
        const d = drawGraph(g, null);
        d.update({steps: {}, loops: {}, took: {}, fired: new Set(), exited: new Set()});
        const z = zoomable(d.el, g.width, g.height);
        mount(body, h('div', {class: 'graph-tools'}, h('span', {class: 'muted'}, `${g.nodes.length} steps, ${g.edges.length} arcs`), h('div', {class: 'spacer'}), z.bar), z.scroller);
      } catch (e) {
        if (e.name !== 'AbortError') mount(body, errorBox(e, 'the step graph could not be drawn'));
      }
      break;
    }
    case 'diff': {
      const older = versions.find((p) => Number(p.version) < version);
      const against = Number(route.query.get('against')) || (older ? Number(older.version) : version);
      const againstSel = h('select', {class: 'input', id: 'against', 'aria-label': 'Compare with', onchange: () => go({tab: 'diff', against: againstSel.value})},
        versions.map((p) => h('option', {value: p.version, selected: Number(p.version) === against}, 'v' + p.version)));
      const out = h('div', {}, spinner());
      mount(body, h('div', {class: 'filters'}, h('label', {class: 'field inline'}, h('span', {class: 'label'}, 'From'), againstSel),
        h('span', {class: 'muted'}, `to v${version}`)), out);
      if (versions.length < 2) { mount(out, notice('This playbook has one version: nothing to compare yet.')); break; }
      try {
        const base = await source(against);
        mount(out, diffView(base.content || '', pb.content || '', against, version));
      } catch (e) {
        if (e.name !== 'AbortError') mount(out, errorBox(e));
      }
      break;
    }
    case 'run':
      mount(body, runForm(path, version, pb, app, signal));
      break;
    default:
      mount(body, h('div', {class: 'code-tools'}, h('span', {class: 'muted'}, `${count((pb.content || '').split('\n').length)} lines · registered ${when(pb.createTime)}`)), highlight(pb.content || ''));
  }
  return () => controller.abort();
}

function crumbs(path) {
  return h('p', {class: 'crumbs'}, h('a', {href: '#/catalog'}, 'Catalog'), ' / ', h('span', {class: 'mono'}, path));
}

// runForm starts an execution: the workload as a JSON object merged over the playbook's
// own (pre-filled from it), checked as it is typed.
function runForm(path, version, pb, app, signal) {
  const area = h('textarea', {class: 'input mono editor', id: 'workload', rows: '14', spellcheck: 'false', 'aria-label': 'Workload (JSON)', 'aria-describedby': 'workload-check'}, '{}');
  const check = h('p', {id: 'workload-check', class: 'help'});
  const labelsIn = h('input', {class: 'input mono', id: 'labels', type: 'text', placeholder: 'optional: team=data, env=prod', 'aria-label': 'Labels'});
  const key = h('input', {class: 'input mono', id: 'idempotency', type: 'text', placeholder: 'optional: retrying with the same key returns the same execution', 'aria-label': 'Idempotency key'});
  const status = h('div', {'aria-live': 'polite'});
  const submit = h('button', {type: 'submit', class: 'btn primary', id: 'start'}, `Start v${version}`);
  const validate = () => {
    try {
      const v = JSON.parse(area.value || '{}');
      if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('the workload must be a JSON object');
      check.textContent = `Valid JSON: ${Object.keys(v).length} key${Object.keys(v).length === 1 ? '' : 's'}, merged over the playbook's workload.`;
      check.className = 'help ok';
      submit.disabled = false;
      return v;
    } catch (e) {
      check.textContent = jsonError(area.value) || e.message;
      check.className = 'help bad';
      submit.disabled = true;
      return null;
    }
  };
  api('/ui/api/graph', {query: {path, version}, signal}).then((g) => { area.value = JSON.stringify(g.workload || {}, null, 2); validate(); }).catch(() => validate());
  area.addEventListener('input', validate);
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Tab' && !e.shiftKey) { e.preventDefault(); area.setRangeText('  ', area.selectionStart, area.selectionEnd, 'end'); validate(); }
  });
  const form = h('form', {class: 'run-form', onsubmit: async (e) => {
    e.preventDefault();
    const workload = validate();
    if (!workload) return;
    let labels;
    try {
      labels = parseLabels(labelsIn.value);
    } catch (err) {
      mount(status, errorBox(err));
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Starting…';
    try {
      const r = await api('/v1/executions', {method: 'POST', body: {path, version, workload, labels, idempotencyKey: key.value.trim() || undefined}, signal});
      app.go('#/executions/' + encodeURIComponent(r.executionId));
    } catch (err) {
      if (err.name === 'AbortError') return;
      mount(status, errorBox(err, 'the run did not start'));
      submit.disabled = false;
      submit.textContent = `Start v${version}`;
    }
  }},
  h('label', {class: 'label', for: 'workload'}, 'Workload'),
  area, check,
  h('label', {class: 'label', for: 'labels'}, 'Labels'),
  labelsIn,
  h('label', {class: 'label', for: 'idempotency'}, 'Idempotency key'),
  key,
  h('div', {class: 'form-actions'}, submit, h('span', {class: 'muted'}, `Runs ${pb.path} version ${version}.`)),
  status);
  return card(null, form);
}
