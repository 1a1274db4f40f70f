// Executions: a page of the list, newest first, filtered by status, playbook path, labels,
// a start-time range and, for a caller with the system role, the tenant (all the API's
// filters, so paging stays a keyset scan however many executions there are). Running rows are followed live: a few over the watch stream,
// the rest by refreshing the page while any of them runs.

import {h, mount, badge, execStatus, EXEC_ENUM, when, fullTime, duration, ms, ago, empty, spinner} from '../dom.js';
import {api, watch, systemCaller, tenantsSeen, TERMINAL} from '../api.js';
import {errorBox, Pager, parseLabels, labelChips} from '../ui.js';

const PAGE = 50;
// Page sizes offered; a link may ask for any from 1 to the API's 500 (size=N).
const SIZES = [25, 50, 100, 200];
// Watch streams a page opens at most (a browser keeps about six connections per origin).
const WATCHED = 3;
const REFRESH = 4000;

const RANGES = [['', 'Any time'], ['1h', 'Last hour'], ['24h', 'Last 24 hours'], ['7d', 'Last 7 days'], ['custom', 'Custom…']];
const SPAN = {'1h': 3_600_000, '24h': 86_400_000, '7d': 7 * 86_400_000};

/** localInput formats a time for a datetime-local input. */
function localInput(t) {
  if (!Number.isFinite(t)) return '';
  const d = new Date(t - new Date(t).getTimezoneOffset() * 60_000);
  return d.toISOString().slice(0, 16);
}

export async function render(root, route, app) {
  const q = route.query;
  const filters = {status: q.get('status') || '', path: q.get('path') || '', labels: q.get('labels') || '', range: q.get('range') || '', from: q.get('from') || '', to: q.get('to') || '', tenant: q.get('tenant') || ''};
  const controller = new AbortController();
  const watched = new Map(); // execution id -> AbortController
  let timer = null;
  let rows = [];

  const body = h('div', {class: 'list-body'}, spinner());
  const pager = new Pager(() => load());
  const size = Math.min(500, Math.max(1, parseInt(q.get('size'), 10) || PAGE));
  const counter = h('span', {class: 'muted'});

  const statusSel = h('select', {class: 'input', id: 'f-status', 'aria-label': 'Status'},
    [['', 'Any status'], ['running', 'Running'], ['completed', 'Completed'], ['failed', 'Failed'], ['cancelled', 'Cancelled']]
      .map(([v, l]) => h('option', {value: v, selected: filters.status === v}, l)));
  const pathIn = h('input', {class: 'input mono', id: 'f-path', type: 'search', placeholder: 'playbook path, e.g. examples/fanout', value: filters.path, list: 'f-paths', 'aria-label': 'Playbook path'});
  const paths = h('datalist', {id: 'f-paths'});
  const labelsIn = h('input', {class: 'input mono', id: 'f-labels', type: 'search', placeholder: 'team=data, env=prod', value: filters.labels, 'aria-label': 'Labels'});
  const rangeSel = h('select', {class: 'input', id: 'f-range', 'aria-label': 'Started'},
    RANGES.map(([v, l]) => h('option', {value: v, selected: filters.range === v}, l)));
  const fromIn = h('input', {class: 'input', id: 'f-from', type: 'datetime-local', value: filters.from, 'aria-label': 'Started from'});
  const toIn = h('input', {class: 'input', id: 'f-to', type: 'datetime-local', value: filters.to, 'aria-label': 'Started before'});
  const custom = h('span', {class: ['custom-range', filters.range !== 'custom' && 'hidden']}, fromIn, h('span', {class: 'muted'}, 'to'), toIn);

  // The tenant: a system caller's own (the default), every tenant, one seen before, or
  // another named. Only a caller the API lets list other tenants sees the control.
  const tenantSel = h('select', {class: 'input', id: 'f-tenant', 'aria-label': 'Tenant'});
  const tenantIn = h('input', {class: 'input mono', id: 'f-tenant-name', type: 'search', placeholder: 'tenant name', value: '', 'aria-label': 'Tenant name'});
  const tenantField = h('label', {class: 'field hidden', id: 'tenant-field'}, h('span', {class: 'label'}, 'Tenant'), h('span', {class: 'tenant-pick'}, tenantSel, tenantIn));
  const fillTenants = () => {
    const seen = tenantsSeen.list().filter((n) => n !== '-');
    if (filters.tenant && filters.tenant !== '-' && !seen.includes(filters.tenant)) seen.push(filters.tenant);
    mount(tenantSel, h('option', {value: '', selected: !filters.tenant}, 'My tenant'), h('option', {value: '-', selected: filters.tenant === '-'}, 'Every tenant'),
      seen.sort().map((n) => h('option', {value: n, selected: filters.tenant === n}, n)), h('option', {value: '?'}, 'Another…'));
    tenantIn.classList.add('hidden');
  };
  tenantSel.addEventListener('change', () => {
    if (tenantSel.value === '?') { tenantIn.classList.remove('hidden'); tenantIn.focus(); return; }
    apply();
  });
  tenantIn.addEventListener('change', () => apply());

  const apply = () => {
    const f = {status: statusSel.value, path: pathIn.value.trim(), labels: labelsIn.value.trim(), range: rangeSel.value};
    if (f.range === 'custom') { f.from = fromIn.value; f.to = toIn.value; }
    f.tenant = tenantSel.value === '?' ? tenantIn.value.trim() : tenantSel.value;
    if (size !== PAGE) f.size = size;
    app.go(app.link(['executions'], f));
  };
  statusSel.addEventListener('change', apply);
  rangeSel.addEventListener('change', () => {
    if (rangeSel.value === 'custom') {
      custom.classList.remove('hidden');
      if (!fromIn.value) fromIn.value = localInput(Date.now() - SPAN['24h']);
      fromIn.focus();
      return;
    }
    apply();
  });
  fromIn.addEventListener('change', apply);
  toIn.addEventListener('change', apply);

  const form = h('form', {class: 'filters', role: 'search', onsubmit: (e) => { e.preventDefault(); apply(); }},
    h('label', {class: 'field'}, h('span', {class: 'label'}, 'Status'), statusSel),
    h('label', {class: 'field grow'}, h('span', {class: 'label'}, 'Playbook'), pathIn, paths),
    h('label', {class: 'field'}, h('span', {class: 'label'}, 'Labels'), labelsIn),
    h('label', {class: 'field'}, h('span', {class: 'label'}, 'Started'), rangeSel),
    custom,
    tenantField,
    h('div', {class: 'field actions'}, h('button', {type: 'submit', class: 'btn primary'}, 'Apply'),
      (filters.status || filters.path || filters.labels || filters.range || filters.tenant) ? h('a', {class: 'btn ghost', href: '#/executions'}, 'Clear') : null));

  mount(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Executions'), counter,
      h('div', {class: 'spacer'}),
      h('a', {class: 'btn', href: '#/catalog'}, 'Start a run')),
    form, body);

  // A tenant named in the link is shown even before the API is asked (and refused, for a
  // caller without the system role, with the API's message).
  if (filters.tenant) { fillTenants(); tenantField.classList.remove('hidden'); }
  systemCaller(controller.signal).then((yes) => {
    if (!yes) return;
    fillTenants();
    tenantField.classList.remove('hidden');
  }).catch(() => {});

  // Offer the catalog's paths as the path filter's suggestions.
  api('/v1/playbooks', {query: {pageSize: 500}, signal: controller.signal}).then((r) => {
    mount(paths, (r.playbooks || []).map((p) => h('option', {value: p.path})));
  }).catch(() => {});

  function range() {
    if (SPAN[filters.range]) return {startTimeAfter: new Date(Date.now() - SPAN[filters.range]).toISOString()};
    if (filters.range === 'custom') {
      const out = {};
      if (filters.from) out.startTimeAfter = new Date(filters.from).toISOString();
      if (filters.to) out.startTimeBefore = new Date(filters.to).toISOString();
      return out;
    }
    return {};
  }

  async function load(quiet) {
    clearTimeout(timer);
    if (!quiet) mount(body, spinner());
    let resp;
    try {
      // Labels filter as labels[key]=value, every one of them required.
      const labels = Object.fromEntries(Object.entries(parseLabels(filters.labels)).map(([k, v]) => [`labels[${k}]`, v]));
      resp = await api('/v1/executions', {signal: controller.signal, query: {
        pageSize: size, pageToken: pager.token, status: EXEC_ENUM[filters.status] || '', path: filters.path, tenant: filters.tenant, ...labels, ...range()}});
    } catch (e) {
      if (e.name === 'AbortError') return;
      mount(body, errorBox(e, 'the executions could not be listed'));
      return;
    }
    pager.next = resp.nextPageToken || '';
    rows = resp.executions || [];
    if (filters.tenant) tenantsSeen.add(rows.map((x) => x.tenant));
    draw();
    follow();
  }

  function draw() {
    counter.textContent = rows.length ? `${rows.length}${pager.next ? '+' : ''} on this page` : '';
    if (!rows.length) {
      mount(body, empty(pager.page > 1 ? 'No more executions.' : 'No executions match these filters.',
        'Start one from the catalog, or with noetl run PLAYBOOK.'), pager.page > 1 ? pager.view() : null);
      return;
    }
    mount(body,
      h('div', {class: 'table-wrap'},
        h('table', {class: 'table executions', id: 'executions'},
          h('thead', {}, h('tr', {},
            h('th', {}, 'Status'), h('th', {}, 'Execution'), h('th', {}, 'Playbook'), h('th', {}, 'Started'),
            filters.tenant ? h('th', {}, 'Tenant') : null,
            h('th', {class: 'num'}, 'Duration'), h('th', {}, 'Labels'), h('th', {}, 'Origin'))),
          h('tbody', {}, rows.map(row)))),
      h('div', {class: 'list-foot'}, pager.view(), sizePick()));
  }

  // sizePick chooses the rows per page (kept in the link as size).
  function sizePick() {
    const sel = h('select', {class: 'input', id: 'f-size', 'aria-label': 'Rows per page'},
      [...new Set([...SIZES, size])].sort((a, b) => a - b).map((n) => h('option', {value: String(n), selected: n === size}, `${n} per page`)));
    sel.addEventListener('change', () => {
      const f = Object.fromEntries(Object.entries(filters).filter(([, v]) => v));
      app.go(app.link(['executions'], {...f, size: Number(sel.value) === PAGE ? '' : sel.value}));
    });
    return sel;
  }

  function row(x) {
    const status = execStatus(x.status);
    // A row of a tenant list carries its tenant to the execution's page, which reads the
    // key's own tenant only and says so when the execution is another's.
    const href = app.link(['executions', x.executionId], {tenant: filters.tenant ? x.tenant : ''});
    const end = x.endTime ? ms(x.endTime) : Date.now();
    return h('tr', {class: ['row-link', 'st-' + status], dataset: {id: x.executionId, status, tenant: x.tenant || ''}, onclick: (e) => {
      if (e.target.closest('a')) return;
      app.go(href);
    }},
    h('td', {}, badge(status)),
    h('td', {class: 'mono'}, h('a', {href, title: x.executionId}, x.executionId)),
    h('td', {}, h('a', {href: app.link(['catalog', ...x.path.split('/')], {version: x.version}), class: 'mono'}, x.path),
      h('span', {class: 'muted'}, ' v' + x.version)),
    h('td', {title: fullTime(x.startTime)}, when(x.startTime), h('span', {class: 'muted small'}, ' · ' + ago(x.startTime))),
    filters.tenant ? h('td', {class: 'mono', dataset: {tenant: x.tenant || ''}}, x.tenant || '') : null,
    h('td', {class: 'num'}, duration(end - ms(x.startTime))),
    h('td', {}, labelChips(x.labels, 3)),
    h('td', {class: 'small'}, origin(x)));
  }

  // follow keeps running rows live: up to WATCHED over the watch stream (each updates its
  // row when its terminal event arrives), and, while others run, a refresh of the page.
  function follow() {
    const running = rows.filter((x) => execStatus(x.status) === 'running');
    for (const [id, c] of watched) {
      if (!running.some((x) => x.executionId === id)) { c.abort(); watched.delete(id); }
    }
    for (const x of running) {
      if (watched.size >= WATCHED || watched.has(x.executionId)) continue;
      const c = new AbortController();
      watched.set(x.executionId, c);
      controller.signal.addEventListener('abort', () => c.abort(), {once: true});
      watch(x.executionId, x.lastSeq, (ev) => {
        x.lastSeq = ev.seq;
        if (TERMINAL.has(ev.type)) {
          x.status = {'playbook.completed': 'EXECUTION_STATUS_COMPLETED', 'playbook.failed': 'EXECUTION_STATUS_FAILED', 'playbook.cancelled': 'EXECUTION_STATUS_CANCELLED'}[ev.type];
          x.endTime = ev.commitTime;
          redraw(x);
        }
      }, c.signal).catch(() => {}).finally(() => watched.delete(x.executionId));
    }
    if (running.length) {
      // Durations of running rows tick, and rows not watched are refreshed.
      timer = setTimeout(() => (running.length > watched.size ? load(true) : (draw(), follow())), REFRESH);
    }
  }

  function redraw(x) {
    const old = body.querySelector(`tr[data-id="${CSS.escape(x.executionId)}"]`);
    if (old) old.replaceWith(row(x));
  }

  await load();
  return () => { controller.abort(); clearTimeout(timer); for (const c of watched.values()) c.abort(); };
}

/** origin says where an execution comes from: a rerun, a parent's sub-playbook step, a trigger or a schedule. */
function origin(x) {
  const to = (id) => h('a', {class: 'mono', href: '#/executions/' + encodeURIComponent(id), title: id}, id.slice(0, 8) + '…');
  if (x.rerunOf) return h('span', {}, 'rerun of ', to(x.rerunOf), x.fromStep ? [' from ', h('span', {class: 'mono'}, x.fromStep)] : '');
  if (x.parentExecutionId) return h('span', {}, 'child of ', to(x.parentExecutionId));
  // Schedules and triggers label the executions they start with their name.
  const l = x.labels || {};
  if (l.trigger) return h('span', {dataset: {origin: 'trigger'}}, 'trigger ', h('a', {class: 'mono', href: '#/triggers'}, l.trigger));
  if (l.schedule) return h('span', {dataset: {origin: 'schedule'}}, 'schedule ', h('a', {class: 'mono', href: '#/schedules'}, l.schedule));
  return '';
}
