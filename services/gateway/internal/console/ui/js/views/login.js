// Sign-in: an API key or a JWT, checked against the API before it is kept (for this tab
// only, in sessionStorage).

import {h, mount} from '../dom.js';
import {auth, probe} from '../api.js';
import {errorBox} from '../ui.js';

let refusedWith = null;

/** refused remembers why the last call was refused, to show on the sign-in page. */
export function refused(err) { refusedWith = err; }

export function render(root, route, app) {
  document.title = 'Sign in · NoETL';
  const status = h('div', {class: 'login-status', 'aria-live': 'polite'});
  if (refusedWith) {
    mount(status, errorBox(refusedWith, 'sign in again'));
    refusedWith = null;
  }
  // No name: the field is never part of a native form submission (so never of a URL).
  const input = h('textarea', {id: 'token', class: 'input mono', rows: '3', required: true, autocomplete: 'off',
    spellcheck: 'false', placeholder: 'noetl_… or eyJhbGciOi…', 'aria-describedby': 'token-help'});
  const submit = h('button', {type: 'submit', class: 'btn primary wide', id: 'sign-in'}, 'Sign in');
  const form = h('form', {class: 'login-form', method: 'post', action: '#', onsubmit: async (e) => {
    e.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    submit.disabled = true;
    submit.textContent = 'Checking…';
    try {
      const r = await probe('/v1/executions?pageSize=1', token);
      if (!r.ok && r.error.httpStatus === 401) {
        mount(status, errorBox(r.error, 'the key was refused'));
        return;
      }
      // A key that may not list executions (403) is still a valid key: keep it.
      auth.set(token);
      app.done();
    } catch (err) {
      mount(status, errorBox(err));
    } finally {
      submit.disabled = false;
      submit.textContent = 'Sign in';
    }
  }},
  h('label', {for: 'token', class: 'label'}, 'API key or JWT'),
  input,
  h('p', {id: 'token-help', class: 'help'},
    'Sent as ', h('code', {}, 'Authorization: Bearer'), ' on every call and kept for this tab only. ',
    'On a dev mesh the admin key is in ', h('code', {}, '~/.cache/noetl/dev/admin.key'), '; create others with ',
    h('code', {}, 'noetl apikey create'), '.'),
  submit);
  mount(root,
    h('div', {class: 'login-card'},
      h('div', {class: 'login-brand'}, h('img', {src: 'favicon.svg', alt: '', width: '36', height: '36'}),
        h('div', {}, h('h1', {}, 'NoETL'), h('p', {class: 'muted'}, 'Sign in to the console'))),
      status, form));
  input.focus();
}
