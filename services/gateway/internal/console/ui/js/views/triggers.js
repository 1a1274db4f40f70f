// Triggers: the tenant's webhook and NATS triggers, the playbook each starts and what its
// last delivery started. A webhook's signing secret is shown once, when it is created (by
// noetl trigger create), and never again: the API does not return it, and nothing here
// could show it.

import {h, mount, when, fullTime, ago, spinner, empty} from '../dom.js';
import {api} from '../api.js';
import {errorBox, Pager} from '../ui.js';

/** source words what fires a trigger: its webhook route, or its NATS subject and stream. */
function source(t) {
  if (t.nats) {
    return h('span', {}, h('code', {}, t.nats.subject), t.nats.stream ? h('span', {class: 'muted'}, ' in stream ', h('code', {}, t.nats.stream)) : null);
  }
  if (t.webhook) return h('span', {}, h('span', {class: 'muted'}, 'POST '), h('code', {}, `/v1/triggers/${t.name}`));
  return '';
}

/** kind is a trigger's source kind: webhook or nats. */
function kind(t) {
  if (t.nats) return 'nats';
  if (t.webhook) return 'webhook';
  return 'unknown';
}

export async function render(root, route, app) {
  const controller = new AbortController();
  const body = h('div', {}, spinner());
  const pager = new Pager(() => load());
  mount(root,
    h('div', {class: 'page-head'}, h('h1', {}, 'Triggers'), h('span', {class: 'muted'}, 'Webhooks and NATS subjects that start playbooks')),
    body);

  async function load() {
    let r;
    try {
      r = await api('/v1/triggers', {query: {pageSize: 100, pageToken: pager.token}, signal: controller.signal});
    } catch (e) {
      if (e.name !== 'AbortError') mount(body, errorBox(e, 'the triggers could not be listed'));
      return;
    }
    pager.next = r.nextPageToken || '';
    const items = r.triggers || [];
    if (!items.length) {
      mount(body, empty('No triggers yet.', 'Create one with noetl trigger create NAME --path P --webhook (or --subject S).'));
      return;
    }
    mount(body,
      h('div', {class: 'table-wrap'}, h('table', {class: 'table', id: 'triggers'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Kind'), h('th', {}, 'Name'), h('th', {}, 'Fired by'), h('th', {}, 'Playbook'),
          h('th', {}, 'Last delivery'), h('th', {}, 'Created'))),
        h('tbody', {}, items.map((t) => {
          const version = Number(t.version) || 0;
          const k = kind(t);
          return h('tr', {dataset: {name: t.name, kind: k}},
            h('td', {}, h('span', {class: ['tag', 'kind-' + k]}, k === 'nats' ? 'NATS' : 'webhook')),
            h('td', {class: 'mono'}, t.name),
            h('td', {class: 'source'}, source(t)),
            h('td', {}, h('a', {class: 'mono', href: app.link(['catalog', ...t.path.split('/')], version ? {version} : {})}, t.path),
              h('span', {class: 'muted'}, version ? ` v${version}` : ' latest'),
              t.workload && Object.keys(t.workload).length ? h('span', {class: 'muted small', title: 'Values merged over the playbook\'s workload at each delivery'}, ` · ${Object.keys(t.workload).length} workload key${Object.keys(t.workload).length === 1 ? '' : 's'}`) : null),
            h('td', {class: 'last', title: fullTime(t.lastFireTime)}, t.lastFireTime ? [ago(t.lastFireTime), ' ',
              t.lastExecutionId ? h('a', {class: 'mono small', dataset: {last: t.lastExecutionId}, href: '#/executions/' + encodeURIComponent(t.lastExecutionId)}, t.lastExecutionId.slice(0, 8) + '…') : null,
              // Each delivery's execution carries the label trigger=NAME.
              h('a', {class: 'small', dataset: {deliveries: t.name}, href: app.link(['executions'], {labels: 'trigger=' + t.name})}, ' · all deliveries')] : h('span', {class: 'muted'}, 'never fired')),
            h('td', {title: fullTime(t.createTime)}, when(t.createTime), t.createdBy ? h('span', {class: 'muted small'}, ' by ' + t.createdBy) : null));
        })))),
      h('p', {class: 'muted small'}, 'A webhook is called with its signature (X-Noetl-Signature: an HMAC-SHA256 of the body under the secret shown once, at creation) or with an API key; its secret is never shown again.'),
      pager.view());
  }

  await load();
  return () => controller.abort();
}
