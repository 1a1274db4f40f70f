// The console's client of the public REST API, on the same origin. The API key or JWT the
// user entered is kept in sessionStorage (it ends with the tab) and sent as
// `Authorization: Bearer` on every call; it never goes in a URL.

const TOKEN = 'noetl.console.token';
const OPEN = 'noetl.console.open';
const SYSTEM = 'noetl.console.system';
const TENANTS = 'noetl.console.tenants';

export const auth = {
  token() { return sessionStorage.getItem(TOKEN) || ''; },
  /** open tells that the gateway answered without credentials (authentication is off). */
  open() { return sessionStorage.getItem(OPEN) === '1'; },
  set(token) { forget(); sessionStorage.setItem(TOKEN, token); },
  setOpen() { forget(); sessionStorage.setItem(OPEN, '1'); },
  clear() { forget(); },
  signedIn() { return this.token() !== '' || this.open(); },
};

/** forget drops the credential and what was learnt about it. */
function forget() {
  for (const k of [TOKEN, OPEN, SYSTEM, TENANTS]) sessionStorage.removeItem(k);
}

// gRPC code numbers to names, as the API's error bodies carry numbers.
const CODES = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS',
  'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED',
  'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];

/** ApiError is an error the API answered: its message names the field, step or line. */
export class ApiError extends Error {
  constructor(httpStatus, body, fallback) {
    const msg = (body && typeof body.message === 'string' && body.message) || fallback || `HTTP ${httpStatus}`;
    super(msg);
    this.name = 'ApiError';
    this.httpStatus = httpStatus;
    this.code = body && Number.isInteger(body.code) ? CODES[body.code] || String(body.code) : '';
    this.details = (body && Array.isArray(body.details)) ? body.details : [];
  }

  /** notes are the error's details as short lines: field violations, reasons, retry hints. */
  notes() {
    const out = [];
    for (const d of this.details) {
      const type = String(d['@type'] || '');
      if (type.endsWith('google.rpc.BadRequest')) {
        for (const v of d.fieldViolations || []) out.push(`${v.field}: ${v.description}`);
      } else if (type.endsWith('google.rpc.ErrorInfo')) {
        const meta = Object.entries(d.metadata || {}).map(([k, v]) => `${k}=${v}`).join(', ');
        if (d.reason !== this.code || meta) out.push(`reason ${d.reason}${meta ? ' (' + meta + ')' : ''}`);
      } else if (type.endsWith('google.rpc.RetryInfo')) {
        out.push(`retry after ${d.retryDelay}`);
      } else if (type.endsWith('google.rpc.RequestInfo') && d.requestId) {
        out.push(`request id ${d.requestId}`);
      }
    }
    // A detail that only repeats the message says nothing more.
    return out.filter((n) => n !== this.message);
  }
}

/** errorOf reads a failed response as an ApiError. */
async function errorOf(res) {
  const text = await res.text().catch(() => '');
  let body = null;
  try { body = JSON.parse(text); } catch { /* not JSON: a proxy's page, a plain-text 404 */ }
  const fallback = `${res.status} ${res.statusText}${text && !body ? ': ' + text.slice(0, 200) : ''}`;
  return new ApiError(res.status, body, fallback.trim());
}

function headers(extra) {
  const h = {Accept: 'application/json', ...extra};
  const t = auth.token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

let onUnauthenticated = () => {};
/** whenUnauthenticated sets what happens when a call is refused for its credentials. */
export function whenUnauthenticated(fn) { onUnauthenticated = fn; }

/** query builds a query string from the set values of params. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? '?' + s : '';
}

/**
 * api calls the REST API: api('/v1/executions', {query: {pageSize: 50}}) or
 * api('/v1/executions', {method: 'POST', body: {...}}). It returns the JSON body or throws
 * an ApiError carrying the API's message.
 */
export async function api(path, opts = {}) {
  const init = {method: opts.method || 'GET', headers: headers(opts.body !== undefined ? {'Content-Type': 'application/json'} : {}), signal: opts.signal};
  if (opts.body !== undefined) init.body = JSON.stringify(opts.body);
  let res;
  try {
    res = await fetch(path + query(opts.query), init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, null, `The gateway did not answer (${e.message}).`);
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401 && !opts.quiet) onUnauthenticated(err);
    throw err;
  }
  if (res.status === 204) return {};
  return res.json();
}

/**
 * systemCaller tells whether the caller may list the executions of every tenant (the
 * system role): asked once per key, with a one-row list of every tenant's executions.
 */
export async function systemCaller(signal) {
  const known = sessionStorage.getItem(SYSTEM);
  if (known) return known === '1';
  let yes = false;
  try {
    await api('/v1/executions', {query: {pageSize: 1, tenant: '-'}, signal, quiet: true});
    yes = true;
  } catch (e) {
    if (!(e instanceof ApiError) || e.httpStatus !== 403) return false; // not known: ask again later
  }
  sessionStorage.setItem(SYSTEM, yes ? '1' : '0');
  return yes;
}

/** tenantsSeen are the tenants a system caller's lists have shown, sorted; add adds some. */
export const tenantsSeen = {
  list() { try { return JSON.parse(sessionStorage.getItem(TENANTS) || '[]'); } catch { return []; } },
  add(names) {
    const all = [...new Set([...this.list(), ...names.filter(Boolean)])].sort().slice(0, 200);
    sessionStorage.setItem(TENANTS, JSON.stringify(all));
  },
};

/**
 * fetchFile downloads a file route of the API (GET, the key in the Authorization header,
 * never in the URL) and returns it as a Blob; progress(n) gets the bytes read so far. A
 * refusal throws an ApiError carrying the API's message.
 */
export async function fetchFile(path, opts = {}) {
  let res;
  try {
    res = await fetch(path + query(opts.query), {headers: headers({Accept: opts.accept || '*/*'}), signal: opts.signal});
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, null, `The gateway did not answer (${e.message}).`);
  }
  if (!res.ok) {
    const err = await errorOf(res);
    if (res.status === 401) onUnauthenticated(err);
    throw err;
  }
  const type = res.headers.get('Content-Type') || 'application/octet-stream';
  const reader = res.body.getReader();
  const parts = [];
  let n = 0;
  for (;;) {
    let r;
    try {
      r = await reader.read();
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new ApiError(0, null, `The download broke off after ${n} bytes (${e.message}).`);
    }
    if (r.done) break;
    parts.push(r.value);
    n += r.value.length;
    if (opts.progress) opts.progress(n);
  }
  return new Blob(parts, {type});
}

/** probe calls path with the given token (or none) and returns the response status. */
export async function probe(path, token) {
  const res = await fetch(path, {headers: token ? {Authorization: 'Bearer ' + token, Accept: 'application/json'} : {Accept: 'application/json'}});
  if (res.ok) return {ok: true};
  return {ok: false, error: await errorOf(res)};
}

export const TERMINAL = new Set(['playbook.completed', 'playbook.failed', 'playbook.cancelled']);

/**
 * watch follows an execution's events as they are committed, over the Server-Sent Events
 * route read with fetch (EventSource cannot send the Authorization header). onEvent gets
 * each event; the returned promise ends after the terminal event, when the watch has
 * nothing left to send (HTTP 204), or when signal aborts. A dropped stream is resumed after
 * the last seq seen, with a growing pause.
 */
export async function watch(id, afterSeq, onEvent, signal) {
  let last = Number(afterSeq) || 0;
  let pause = 500;
  for (;;) {
    if (signal && signal.aborted) return;
    let res;
    try {
      res = await fetch(`/v1/executions/${encodeURIComponent(id)}/events:watch${query({afterSeq: last})}`,
        {headers: headers({Accept: 'text/event-stream'}), signal});
    } catch (e) {
      if (e.name === 'AbortError') return;
      await rest(pause, signal);
      pause = Math.min(pause * 2, 10_000);
      continue;
    }
    if (res.status === 204) return;
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401) onUnauthenticated(err);
      throw err;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const ev = parseBlock(block);
          if (!ev) continue;
          if (ev.event === 'error') throw new ApiError(0, safeJSON(ev.data), 'the event stream failed');
          const e = safeJSON(ev.data);
          if (!e) continue;
          last = Math.max(last, Number(e.seq) || 0);
          pause = 500;
          onEvent(e);
          if (TERMINAL.has(e.type)) return;
        }
      }
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e instanceof ApiError) throw e;
    }
    await rest(pause, signal);
    pause = Math.min(pause * 2, 10_000);
  }
}

function parseBlock(block) {
  const ev = {event: 'message', data: ''};
  let any = false;
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const i = line.indexOf(':');
    const field = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
    if (field === 'event') ev.event = value;
    else if (field === 'data') ev.data += (ev.data ? '\n' : '') + value;
    else if (field === 'id') ev.id = value;
    any = true;
  }
  return any ? ev : null;
}

function safeJSON(s) {
  try { return JSON.parse(s); } catch { return null; }
}

function rest(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, {once: true});
  });
}

/**
 * iterationOf is an event's loop iteration index, -1 outside a loop. The API's JSON leaves
 * zero out, so an iteration without an index is iteration 0.
 */
export function iterationOf(e) {
  return e.iteration ? (e.iteration.index ?? 0) : -1;
}

/**
 * enters reports whether an event enters its step in a new epoch: a step.enter, or the
 * command.issued of a step of one command, which carries the entry (payload.enter).
 */
export function enters(e) {
  return e.type === 'step.enter' || (e.type === 'command.issued' && !!(e.payload && e.payload.enter));
}

/** resultId is the id of a result URI, its last element, as GET /v1/results/{id} takes. */
export function resultId(uri) {
  return String(uri || '').split('/').pop();
}
