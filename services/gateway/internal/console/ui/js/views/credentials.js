// Credentials: names and types only. The API never returns a credential's data, and the
// console has no way to ask for it.

import {h, mount, when, fullTime, spinner, empty} from '../dom.js';
import {api} from '../api.js';
import {errorBox, Pager} from '../ui.js';

export async function render(root) {
  const controller = new AbortController();
  const body = h('div', {}, spinner());
  const pager = new Pager(() => load());
  mount(root, h('div', {class: 'page-head'}, h('h1', {}, 'Credentials'), h('span', {class: 'muted'}, 'Names and types; values are never shown')),
    body);

  async function load() {
    mount(body, spinner());
    let r;
    try {
      r = await api('/v1/credentials', {query: {pageSize: 100, pageToken: pager.token}, signal: controller.signal});
    } catch (e) {
      if (e.name !== 'AbortError') mount(body, errorBox(e, 'the credentials could not be listed'));
      return;
    }
    pager.next = r.nextPageToken || '';
    const items = r.credentials || [];
    if (!items.length) {
      mount(body, empty('No credentials yet.', 'Store one with noetl credentials set NAME --type TYPE --from-file FILE.json; playbooks use it through keychain and tool auth.'));
      return;
    }
    mount(body,
      h('div', {class: 'table-wrap'}, h('table', {class: 'table', id: 'credentials'},
        h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Type'), h('th', {}, 'Last stored'))),
        h('tbody', {}, items.map((c) => h('tr', {},
          h('td', {class: 'mono'}, c.name),
          h('td', {}, h('span', {class: 'tag'}, c.type)),
          h('td', {title: fullTime(c.updateTime)}, when(c.updateTime))))))),
      pager.view());
  }

  await load();
  return () => controller.abort();
}
