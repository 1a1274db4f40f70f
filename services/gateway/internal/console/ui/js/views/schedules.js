// Schedules: the tenant's cron and interval schedules, when each fires next and what its last
// tick started, with pause and resume.

import {h, mount, when, fullTime, ago, spinner, empty, badge} from '../dom.js';
import {api} from '../api.js';
import {errorBox, Pager} from '../ui.js';

/** timing words a schedule's cron (with its zone) or interval. */
function timing(s) {
  if (s.cron) return h('span', {}, h('code', {}, s.cron), s.timeZone && s.timeZone !== 'UTC' ? ` (${s.timeZone})` : ' (UTC)');
  if (s.interval) return h('span', {}, 'every ', h('code', {}, s.interval));
  return '';
}

/** inFuture words a time to come: in 5 s, in 3 min, in 2 h. */
function inFuture(ts) {
  const d = Date.parse(ts) - Date.now();
  if (!Number.isFinite(d)) return '';
  if (d <= 0) return 'due';
  if (d < 60_000) return `in ${Math.round(d / 1000)} s`;
  if (d < 3_600_000) return `in ${Math.round(d / 60_000)} min`;
  if (d < 86_400_000) return `in ${Math.round(d / 3_600_000)} h`;
  return `in ${Math.round(d / 86_400_000)} d`;
}

export async function render(root, route, app) {
  const controller = new AbortController();
  const body = h('div', {}, spinner());
  const msg = h('div', {'aria-live': 'polite'});
  const pager = new Pager(() => load());
  mount(root, h('div', {class: 'page-head'}, h('h1', {}, 'Schedules'), h('span', {class: 'muted'}, 'Cron and interval starts of playbooks')), msg, body);

  async function toggle(s, b) {
    b.disabled = true;
    try {
      await api(`/v1/schedules/${encodeURIComponent(s.name)}:${s.paused ? 'resume' : 'pause'}`, {method: 'POST', body: {}, signal: controller.signal});
      mount(msg);
      await load();
    } catch (e) {
      b.disabled = false;
      if (e.name !== 'AbortError') mount(msg, errorBox(e, `the schedule was not ${s.paused ? 'resumed' : 'paused'}`));
    }
  }

  async function load() {
    let r;
    try {
      r = await api('/v1/schedules', {query: {pageSize: 100, pageToken: pager.token}, signal: controller.signal});
    } catch (e) {
      if (e.name !== 'AbortError') mount(body, errorBox(e, 'the schedules could not be listed'));
      return;
    }
    pager.next = r.nextPageToken || '';
    const items = r.schedules || [];
    if (!items.length) {
      mount(body, empty('No schedules yet.', 'Create one with noetl schedule create NAME --path P --cron EXPR (or --every D).'));
      return;
    }
    mount(body,
      h('div', {class: 'table-wrap'}, h('table', {class: 'table', id: 'schedules'},
        h('thead', {}, h('tr', {}, h('th', {}, 'State'), h('th', {}, 'Name'), h('th', {}, 'When'), h('th', {}, 'Playbook'),
          h('th', {}, 'Next'), h('th', {}, 'Last tick'), h('th', {}))),
        h('tbody', {}, items.map((s) => {
          const b = h('button', {type: 'button', class: 'btn small', dataset: {toggle: s.name}}, s.paused ? 'Resume' : 'Pause');
          b.addEventListener('click', () => toggle(s, b));
          const version = Number(s.version) || 0;
          return h('tr', {dataset: {name: s.name, paused: String(!!s.paused)}},
            h('td', {}, badge(s.paused ? 'paused' : 'active')),
            h('td', {class: 'mono'}, s.name),
            h('td', {}, timing(s)),
            h('td', {}, h('a', {class: 'mono', href: app.link(['catalog', ...s.path.split('/')], version ? {version} : {})}, s.path),
              h('span', {class: 'muted'}, version ? ` v${version}` : ' latest')),
            h('td', {title: fullTime(s.nextFireTime)}, s.nextFireTime ? [when(s.nextFireTime), h('span', {class: 'muted small'}, ' · ' + inFuture(s.nextFireTime))] : h('span', {class: 'muted'}, '—')),
            h('td', {title: fullTime(s.lastFireTime)}, s.lastFireTime ? [ago(s.lastFireTime), ' ',
              s.lastExecutionId ? h('a', {class: 'mono small', href: '#/executions/' + encodeURIComponent(s.lastExecutionId)}, s.lastExecutionId.slice(0, 8) + '…') : null] : h('span', {class: 'muted'}, 'not yet')),
            h('td', {class: 'num'}, b));
        })))),
      pager.view());
  }

  await load();
  return () => controller.abort();
}
