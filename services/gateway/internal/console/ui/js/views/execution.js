// One execution: its header with the cancel and rerun buttons, then the step graph, the timeline, the
// event log, the results and the step logs. A running execution is followed live over the watch
// stream: every committed event updates the graph, the timeline and the log, and each command
// that ends with logs reloads the step logs.

import {h, mount, badge, execStatus, stepStatus, when, fullTime, duration, ms, tabsIn, spinner, empty, throttle, copyButton, bytes, count, download} from '../dom.js';
import {api, fetchFile, watch, resultId, iterationOf, enters, TERMINAL} from '../api.js';
import {errorBox, notice, confirmDialog, card, labelChips} from '../ui.js';
import {drawGraph, legend, zoomable} from '../graph.js';
import {model, drawTimeline, legendTimeline} from '../timeline.js';
import {jsonTree} from '../json.js';

const EVENT_PAGE = 1000;
const MAX_EVENTS = 20_000;
const SHOWN_EVENTS = 500;
const TABLE_PAGE = 50;
const LOG_PAGE = 1000;
const MAX_LOG_ENTRIES = 10_000;

export async function render(root, route, app) {
  const id = route.parts[1];
  const controller = new AbortController();
  const signal = controller.signal;
  let tab = route.query.get('tab') || 'graph';
  let selected = route.query.get('step') || '';
  let eventFilter = route.query.get('filter') || '';
  let x; let g = null; let graphErr = null; let events = []; let truncated = false;
  let ticker = null;
  let logs = null; let logsErr = null; let logsTruncated = false; let logStep = route.query.get('logstep') || '';

  mount(root, spinner('Loading the execution…'));
  try {
    x = (await api(`/v1/executions/${encodeURIComponent(id)}`, {signal})).execution;
  } catch (e) {
    if (e.name === 'AbortError') return;
    const tenant = route.query.get('tenant');
    mount(root, h('div', {class: 'page-head'}, h('h1', {}, 'Execution'), h('span', {class: 'mono muted'}, id)), errorBox(e, 'the execution could not be read'),
      tenant && e.code === 'NOT_FOUND' ? notice(`This execution belongs to tenant ${tenant}. A key reads the executions of its own tenant: the system role lists every tenant's, but opening one takes a key of that tenant.`, 'warn') : null,
      h('p', {}, h('a', {href: '#/executions'}, '← All executions')));
    return () => controller.abort();
  }
  document.title = `${x.path} ${id.slice(0, 8)} · NoETL`;
  const [graphResult] = await Promise.allSettled([
    api('/ui/api/graph', {query: {path: x.path, version: x.version}, signal}),
    loadEvents(),
  ]);
  if (graphResult.status === 'fulfilled') g = graphResult.value;
  else graphErr = graphResult.reason;

  async function loadEvents() {
    let token = '';
    for (;;) {
      const r = await api(`/v1/executions/${encodeURIComponent(id)}/events`, {query: {pageSize: EVENT_PAGE, pageToken: token}, signal});
      events.push(...(r.events || []));
      token = r.nextPageToken || '';
      if (!token) return;
      if (events.length >= MAX_EVENTS) { truncated = true; return; }
    }
  }

  const head = h('div', {class: 'exec-head'});
  const actionMsg = h('div', {class: 'action-msg', 'aria-live': 'polite'});
  const body = h('div', {class: 'tab-body'});
  const tabBar = h('div');
  mount(root, h('p', {class: 'crumbs'}, h('a', {href: '#/executions'}, 'Executions'), ' / ', h('span', {class: 'mono'}, id)), head, actionMsg, tabBar, body);

  let graph = null;
  let graphWrap = null;

  // derive reads what the graph needs from the execution and its events.
  function derive() {
    const steps = {};
    // A step still running when its execution was cancelled was stopped: it shows so.
    const stopped = execStatus(x.status) === 'cancelled';
    for (const [name, s] of Object.entries(x.steps || {})) {
      const st = stepStatus(s.status);
      steps[name] = {status: stopped && st === 'running' ? 'cancelled' : st, error: s.error, epoch: s.epoch, reused: !!s.reused};
    }
    const loops = {};
    const fired = new Set();
    const exited = new Set();
    const latest = {};
    for (const e of events) {
      const epoch = (e.iteration && e.iteration.epoch) || 1;
      if (enters(e)) {
        latest[e.step] = epoch;
        const lp = e.payload && e.payload.loop;
        if (lp) loops[e.step] = {total: Array.isArray(lp.items) && lp.items.length ? lp.items.length : Number(lp.total) || 0, done: 0, failed: 0, seen: new Map(), epoch};
      } else if ((e.type === 'command.completed' || e.type === 'command.failed') && loops[e.step] && iterationOf(e) >= 0 && epoch === loops[e.step].epoch) {
        loops[e.step].seen.set(iterationOf(e), e.type === 'command.completed');
      } else if (e.type === 'step.exit') {
        exited.add(e.step);
        for (const to of (e.payload && e.payload.fired) || []) fired.add(e.step + '\u0000' + to);
      }
    }
    // A rerun's reused steps were routed in the original: their arcs to the steps this
    // execution entered were taken, those to skipped steps not.
    if (g) {
      for (const e of g.edges) {
        if (!(steps[e.from] || {}).reused) continue;
        exited.add(e.from);
        const to = (steps[e.to] || {}).status;
        if (to && to !== 'skipped' && to !== 'pending') fired.add(e.from + '\u0000' + e.to);
      }
    }
    for (const l of Object.values(loops)) {
      for (const ok of l.seen.values()) { if (ok) l.done++; else l.failed++; }
    }
    const took = {};
    const m = model(events, x);
    for (const r of m.rows) {
      if (r.status !== 'skipped' && Number.isFinite(r.end)) took[r.step] = r.end - r.start;
    }
    return {steps, loops, took, fired, exited};
  }

  function drawHead() {
    const status = execStatus(x.status);
    const running = status === 'running';
    if (!running && actionMsg.querySelector('.alert.info')) mount(actionMsg);
    const end = x.endTime ? ms(x.endTime) : Date.now();
    const failed = x.failedSteps || [];
    const cancel = running ? h('button', {type: 'button', class: 'btn danger', id: 'cancel', onclick: doCancel}, 'Cancel execution')
      : h('button', {type: 'button', class: 'btn', id: 'rerun', onclick: doRerun}, 'Rerun…');
    mount(head,
      h('div', {class: 'exec-title'},
        h('h1', {}, h('a', {href: app.link(['catalog', ...x.path.split('/')], {version: x.version}), class: 'mono'}, x.path), h('span', {class: 'muted'}, ' v' + x.version)),
        h('div', {class: 'exec-status', id: 'exec-status', dataset: {status}}, badge(status)),
        h('div', {class: 'spacer'}),
        cancel),
      h('dl', {class: 'facts'},
        fact('Execution', h('span', {class: 'mono'}, id, ' ', copyButton(id))),
        fact('Started', h('span', {title: fullTime(x.startTime)}, when(x.startTime))),
        fact(running ? 'Running for' : 'Took', h('span', {id: 'exec-duration'}, duration(end - ms(x.startTime)))),
        fact('Events', count(Number(x.lastSeq) || events.length)),
        x.parentExecutionId ? fact('Parent', h('a', {class: 'mono', href: '#/executions/' + encodeURIComponent(x.parentExecutionId)}, x.parentExecutionId)) : null,
        x.rerunOf ? fact('Rerun of', h('span', {}, h('a', {class: 'mono', href: '#/executions/' + encodeURIComponent(x.rerunOf)}, x.rerunOf),
          x.fromStep ? [' from ', h('span', {class: 'mono'}, x.fromStep)] : ' (whole playbook)')) : null,
        x.labels && Object.keys(x.labels).length ? fact('Labels', labelChips(x.labels, 32)) : null,
        failed.length ? fact('Failed steps', failed.join(', ')) : null),
      x.error && x.error.message ? h('div', {class: ['alert', status === 'cancelled' ? 'stopped' : 'error']},
        h('div', {class: 'alert-head'}, h('strong', {}, status === 'cancelled' ? 'Cancelled' : 'The execution failed'),
          x.error.code && x.error.code !== status ? h('span', {class: 'alert-meta'}, x.error.code) : null),
        h('p', {class: 'alert-msg mono'}, x.error.message)) : null,
      truncated ? notice(`Only the first ${count(MAX_EVENTS)} events are loaded; the timeline and the log stop there.`, 'warn') : null);
  }

  function fact(k, v) { return h('div', {class: 'fact'}, h('dt', {}, k), h('dd', {}, v)); }

  async function doCancel() {
    const reason = await confirmDialog({title: 'Cancel this execution?', body: 'Running tools are stopped and running child executions cancelled. It cannot be resumed.',
      action: 'Cancel execution', danger: true, reason: 'Reason (optional, recorded in the log)'});
    if (reason === null) return;
    const b = head.querySelector('#cancel');
    if (b) { b.disabled = true; b.textContent = 'Cancelling…'; }
    try {
      await api(`/v1/executions/${encodeURIComponent(id)}:cancel`, {method: 'POST', body: {reason}, signal});
      mount(actionMsg, notice('Cancellation requested; the execution ends once its running work has stopped.'));
      refresh();
    } catch (e) {
      if (b) { b.disabled = false; b.textContent = 'Cancel execution'; }
      mount(actionMsg, errorBox(e, 'the execution was not cancelled'));
    }
  }

  // Rerun: the same version, workload and labels, from a step the original entered (its
  // earlier results reused) or from the start.
  async function doRerun() {
    const entered = (g ? g.nodes.map((n) => n.name) : Object.keys(x.steps || {}).sort()).filter((n) => (x.steps || {})[n]?.epoch > 0);
    const sel = h('select', {class: 'input', id: 'rerun-from', 'aria-label': 'Run from'},
      h('option', {value: ''}, 'the start (a plain rerun)'),
      entered.map((n) => h('option', {value: n, selected: n === selected}, n)));
    const from = await confirmDialog({title: 'Rerun this execution?', action: 'Rerun', field: sel,
      body: `A new execution of ${x.path} v${x.version} with the same workload and labels. From a step, the steps completed before it keep their results (reused, not run) and it runs from that step on.`});
    if (from === null) return;
    try {
      const r = await api(`/v1/executions/${encodeURIComponent(id)}:rerun`, {method: 'POST', body: {fromStep: from || undefined}, signal});
      app.go('#/executions/' + encodeURIComponent(r.executionId));
    } catch (e) {
      if (e.name !== 'AbortError') mount(actionMsg, errorBox(e, 'the rerun did not start'));
    }
  }

  function drawTabs() {
    const n = events.length;
    tabsIn(tabBar, [['graph', 'Graph'], ['timeline', 'Timeline'], ['events', `Events (${count(n)}${truncated ? '+' : ''})`], ['results', 'Results'],
      ['logs', logs ? `Logs (${count(logs.length)}${logsTruncated ? '+' : ''})` : 'Logs']], tab, (t) => {
      tab = t;
      app.replace(app.link(['executions', id], {tab: t, step: selected, filter: tab === 'events' ? eventFilter : ''}));
      drawTabs();
      drawBody();
    });
  }

  function drawBody() {
    switch (tab) {
      case 'timeline': return drawTimelineTab();
      case 'events': return drawEventsTab();
      case 'results': return drawResultsTab();
      case 'logs': return drawLogsTab();
      default: return drawGraphTab();
    }
  }

  // The graph tab keeps its drawing between updates; only statuses change.
  function drawGraphTab() {
    if (graphErr) { mount(body, errorBox(graphErr, 'the step graph could not be drawn')); return; }
    if (!graph) {
      graph = drawGraph(g, (name) => { selected = name; graph.select(name); drawStepPanel(); app.replace(app.link(['executions', id], {tab: 'graph', step: name})); });
      const z = zoomable(graph.el, g.width, g.height);
      graphWrap = {z, panel: h('div', {class: 'step-panel', id: 'step-panel'})};
    }
    graph.update(derive());
    graph.select(selected);
    mount(body,
      h('div', {class: 'graph-tools'}, legend(), h('div', {class: 'spacer'}), graphWrap.z.bar),
      graphWrap.z.scroller,
      g.warnings && g.warnings.length ? h('ul', {class: 'warnings'}, g.warnings.map((w) => h('li', {}, w))) : null,
      graphWrap.panel);
    drawStepPanel();
  }

  function drawStepPanel() {
    if (!graphWrap) return;
    const panel = graphWrap.panel;
    const n = selected && g.nodes.find((s) => s.name === selected);
    if (!n) { mount(panel, h('p', {class: 'muted'}, 'Select a step to see its status, error and result.')); return; }
    const s = (x.steps || {})[n.name] || {};
    const d = derive();
    const status = (d.steps[n.name] || {}).status || 'pending';
    const loop = d.loops[n.name];
    mount(panel,
      h('div', {class: 'step-panel-head'},
        h('h2', {class: 'mono'}, n.name), badge(status),
        h('span', {class: 'muted'}, n.kind + (n.tools ? ' (' + n.tools.join(' → ') + ')' : '')),
        h('div', {class: 'spacer'}),
        h('button', {type: 'button', class: 'btn small', onclick: () => { eventFilter = n.name; tab = 'events'; drawTabs(); drawBody(); }}, 'Its events'),
        h('button', {type: 'button', class: 'btn small', id: 'step-logs', onclick: () => { logStep = n.name; tab = 'logs'; app.replace(app.link(['executions', id], {tab: 'logs', logstep: n.name})); drawTabs(); drawBody(); }}, 'Its logs'),
        h('button', {type: 'button', class: 'btn ghost small', 'aria-label': 'Close', onclick: () => { selected = ''; graph.select(''); drawStepPanel(); }}, '✕')),
      n.desc ? h('p', {}, n.desc) : null,
      h('dl', {class: 'facts'},
        fact('Entered', s.epoch ? `${s.epoch} time${s.epoch > 1 ? 's' : ''}` : 'not yet'),
        d.took[n.name] !== undefined ? fact('Took', duration(d.took[n.name])) : null,
        n.loop ? fact('Loop', `${n.loop.mode} over ${n.loop.in || 'a list'} as ${n.loop.iterator}`) : null,
        loop ? fact('Iterations', `${loop.done} of ${loop.total} done${loop.failed ? ', ' + loop.failed + ' failed' : ''}`) : null,
        n.when ? fact('Guard', h('code', {}, n.when)) : null,
        fact('Line', String(n.line))),
      s.error && s.error.message ? h('div', {class: 'alert error'}, h('p', {class: 'alert-msg mono'}, s.error.message)) : null,
      s.result !== undefined ? jsonTree(s.result, 1) : null,
      s.resultRef ? refCard(n.name, s.resultRef) : null);
  }

  let tlWidth = 0;
  function drawTimelineTab() {
    if (!events.length) { mount(body, empty('No events yet.')); return; }
    const tlWrap = h('div', {class: 'timeline-wrap', id: 'timeline'});
    mount(body, h('div', {class: 'graph-tools'}, legendTimeline()), tlWrap);
    tlWidth = tlWrap.clientWidth || root.clientWidth || 1000;
    mount(tlWrap, drawTimeline(model(events, x), Math.max(720, tlWidth), execStatus(x.status) === 'running'));
  }

  // The event log: every event in seq order, each row opening to its payload.
  let shown = SHOWN_EVENTS;
  function drawEventsTab() {
    const filterIn = h('input', {type: 'search', class: 'input', placeholder: 'Filter by step or type', value: eventFilter, 'aria-label': 'Filter events', id: 'event-filter'});
    const tableBox = h('div', {class: 'table-wrap'});
    const t0 = ms(x.startTime);
    const draw = () => {
      const f = eventFilter.toLowerCase();
      const list = f ? events.filter((e) => (e.step || '').toLowerCase().includes(f) || e.type.includes(f)) : events;
      const rows = [];
      for (const e of list.slice(0, shown)) {
        const open = h('tr', {class: 'event-detail hidden'}, h('td', {colspan: '7'}, jsonTree(detailOf(e), 1)));
        const tr = h('tr', {class: ['event', 'ev-' + e.type.split('.')[0], e.type.endsWith('failed') || e.type.endsWith('error') ? 'ev-bad' : ''], tabindex: '0', dataset: {seq: e.seq, type: e.type},
          onclick: () => { open.classList.toggle('hidden'); tr.classList.toggle('open'); }},
        h('td', {class: 'num mono'}, e.seq),
        h('td', {class: 'num mono', title: fullTime(e.commitTime)}, '+' + duration(ms(e.commitTime) - t0)),
        h('td', {}, h('span', {class: 'ev-type mono'}, e.type)),
        h('td', {class: 'mono'}, e.step || ''),
        h('td', {class: 'num mono'}, iterationOf(e) >= 0 ? iterationOf(e) : ''),
        h('td', {class: 'num mono'}, e.attempt || ''),
        h('td', {class: 'muted'}, e.producer || ''));
        rows.push(tr, open);
      }
      mount(tableBox,
        h('table', {class: 'table events', id: 'events'},
          h('thead', {}, h('tr', {}, h('th', {class: 'num'}, 'Seq'), h('th', {class: 'num'}, 'At'), h('th', {}, 'Type'), h('th', {}, 'Step'),
            h('th', {class: 'num'}, 'Iteration'), h('th', {class: 'num'}, 'Attempt'), h('th', {}, 'Producer'))),
          h('tbody', {}, rows)),
        list.length > shown ? h('div', {class: 'pager'}, h('button', {type: 'button', class: 'btn', onclick: () => { shown += SHOWN_EVENTS; draw(); }},
          `Show ${Math.min(SHOWN_EVENTS, list.length - shown)} more of ${count(list.length - shown)}`)) : null,
        !list.length ? empty('No events match.') : null);
    };
    filterIn.addEventListener('input', () => { eventFilter = filterIn.value; shown = SHOWN_EVENTS; draw(); });
    mount(body, h('div', {class: 'graph-tools'}, filterIn, h('span', {class: 'muted'}, 'Click a row to open its payload.')), tableBox);
    draw();
  }

  function detailOf(e) {
    const out = {};
    for (const k of ['eventId', 'commandId', 'payload', 'result', 'resultRef', 'error', 'iteration', 'produceTime', 'commitTime']) {
      if (e[k] !== undefined) out[k] = e[k];
    }
    return out;
  }

  function drawResultsTab() {
    const blocks = [];
    const status = execStatus(x.status);
    if (x.result !== undefined) blocks.push(card('Result of the execution', jsonTree(x.result, 2)));
    else if (status === 'running') blocks.push(notice('The execution is still running; its result comes with its end.'));
    else if (x.error) blocks.push(errorBox({message: x.error.message}, 'no result'));
    const order = g ? g.nodes.map((n) => n.name) : Object.keys(x.steps || {}).sort();
    const stepCards = [];
    for (const name of order) {
      const s = (x.steps || {})[name];
      if (!s) continue;
      const st = stepStatus(s.status);
      const content = [];
      if (s.error && s.error.message) content.push(h('div', {class: 'alert error'}, h('p', {class: 'alert-msg mono'}, s.error.message)));
      if (s.resultRef) content.push(refCard(name, s.resultRef));
      else if (s.result !== undefined) content.push(jsonTree(s.result, 1));
      else if (!content.length) content.push(h('p', {class: 'muted'}, st === 'skipped' ? 'Skipped: no result.' : 'No result.'));
      stepCards.push(h('section', {class: 'card step-result', dataset: {step: name}},
        h('div', {class: 'card-title-row'}, h('h3', {class: 'mono'}, name), badge(st)), content));
    }
    mount(body, blocks, h('h2', {class: 'section-title'}, 'Results of the steps'), stepCards.length ? stepCards : empty('No step has finished yet.'));
  }

  // refCard shows a result held by reference: its size and, for a table, a page of its
  // rows with downloads as CSV and Arrow; other results load as JSON on demand.
  function refCard(step, ref) {
    const rid = resultId(ref.uri);
    const rows = Number(ref.rowCount) || 0;
    const box = h('div', {class: 'ref-body'});
    const meta = h('p', {class: 'muted small'}, 'Stored by reference · ', bytes(ref.size), ' · ', ref.contentType || '', rows ? ` · ${count(rows)} rows` : '', ' · ',
      h('span', {class: 'mono'}, ref.uri));
    if (rows) {
      let offset = 0;
      const page = async () => {
        mount(box, spinner('Reading rows…'));
        try {
          const r = await api(`/v1/results/${encodeURIComponent(rid)}`, {query: {offset, limit: TABLE_PAGE}, signal});
          mount(box, table(r.value || {}, Number(r.totalRows) || rows, offset, (o) => { offset = o; page(); }));
        } catch (e) {
          if (e.name !== 'AbortError') mount(box, errorBox(e, 'the rows could not be read'));
        }
      };
      // The table as a file, from the gateway's export route: CSV, or the Arrow IPC
      // stream as stored (for pandas, polars, DuckDB).
      const file = (format, label, ext) => {
        const b = h('button', {type: 'button', class: 'btn small', dataset: {[format]: step}, title: `Download all ${count(rows)} rows as ${label}`, onclick: async () => {
          b.disabled = true;
          try {
            const blob = await fetchFile(`/v1/results/${encodeURIComponent(rid)}/export`, {query: {format}, signal,
              progress: (n) => { b.textContent = `Downloading… ${bytes(n)}`; }});
            download(`${step}.${ext}`, blob);
          } catch (e) {
            if (e.name !== 'AbortError') mount(box, errorBox(e, `the ${label} download failed`));
          } finally {
            b.disabled = false; b.textContent = label;
          }
        }}, label);
        return b;
      };
      page();
      return h('div', {class: 'ref'}, h('div', {class: 'ref-head'}, meta, h('div', {class: 'ref-actions'}, file('csv', 'CSV', 'csv'), file('arrow', 'Arrow', 'arrow'))), box);
    }
    const load = h('button', {type: 'button', class: 'btn small', onclick: async () => {
      mount(box, spinner());
      try {
        const r = await api(`/v1/results/${encodeURIComponent(rid)}`, {signal});
        mount(box, jsonTree(r.value, 1));
      } catch (e) {
        if (e.name !== 'AbortError') mount(box, errorBox(e, 'the result could not be read'));
      }
    }}, 'Load the result');
    return h('div', {class: 'ref'}, h('div', {class: 'ref-head'}, meta, load), box);
  }

  // The step logs: what each command's tools wrote (stdout, stderr, diagnostics), read from
  // GET /v1/executions/{id}/logs, grouped by step in graph order. While the execution runs,
  // every event that carries logs reloads them.
  async function loadLogs() {
    const out = [];
    let token = '';
    let more = false;
    for (;;) {
      const r = await api(`/v1/executions/${encodeURIComponent(id)}/logs`, {query: {pageSize: LOG_PAGE, pageToken: token}, signal});
      out.push(...(r.entries || []));
      token = r.nextPageToken || '';
      if (!token) break;
      if (out.length >= MAX_LOG_ENTRIES) { more = true; break; }
    }
    logs = out; logsTruncated = more; logsErr = null;
  }

  const reloadLogs = throttle(async () => {
    try {
      await loadLogs();
    } catch (e) {
      if (e.name === 'AbortError') return;
      logsErr = e;
    }
    drawTabs();
    if (tab === 'logs') drawLogsTab();
  }, 400);

  function drawLogsTab() {
    if (logsErr) { mount(body, errorBox(logsErr, 'the step logs could not be read')); return; }
    if (!logs) {
      mount(body, spinner('Reading the step logs…'));
      reloadLogs();
      return;
    }
    const order = g ? g.nodes.map((n) => n.name) : [];
    const steps = [...new Set([...order.filter((n) => logs.some((e) => e.step === n)), ...logs.map((e) => e.step)])];
    const pick = h('select', {class: 'input', id: 'log-step', 'aria-label': 'Step'},
      h('option', {value: ''}, 'All steps'),
      steps.map((n) => h('option', {value: n, selected: n === logStep}, n)));
    pick.addEventListener('input', () => { logStep = pick.value; app.replace(app.link(['executions', id], {tab: 'logs', logstep: logStep})); drawLogsTab(); });
    const live = execStatus(x.status) === 'running';
    const sections = [];
    for (const step of steps) {
      if (logStep && step !== logStep) continue;
      const entries = logs.filter((e) => e.step === step);
      sections.push(h('section', {class: 'card step-logs', dataset: {step}},
        h('div', {class: 'card-title-row'}, h('h3', {class: 'mono'}, step), badge(stepStatus(((x.steps || {})[step] || {}).status)),
          h('span', {class: 'muted small'}, `${entries.length} stream${entries.length === 1 ? '' : 's'}`)),
        entries.map(logEntry)));
    }
    mount(body,
      h('div', {class: 'graph-tools'}, pick, h('div', {class: 'spacer'}),
        h('span', {class: 'muted'}, live ? 'Following: a command’s logs appear when it ends.' : 'Each stream keeps its last 64 KiB; secrets are masked.')),
      logsTruncated ? notice(`Only the first ${count(MAX_LOG_ENTRIES)} streams are loaded.`, 'warn') : null,
      sections.length ? sections : empty(logStep ? `Step ${logStep} wrote no logs.` : (live ? 'No command has written logs yet.' : 'No step wrote logs.'),
        'python and shell steps keep what they print; http and postgres steps add a line about each call.'));
  }

  function logEntry(e) {
    const where = [];
    if (e.iteration && iterationOf(e) >= 0) where.push(`iteration ${iterationOf(e)}`);
    if ((e.attempt || 1) > 1) where.push(`attempt ${e.attempt}`);
    return h('div', {class: ['log-entry', 'log-' + e.stream], dataset: {stream: e.stream, command: e.commandId}},
      h('div', {class: 'log-head'},
        h('span', {class: ['log-stream', 'mono']}, e.stream),
        e.tool ? h('span', {class: 'mono muted'}, e.tool) : null,
        where.length ? h('span', {class: 'muted'}, where.join(' · ')) : null,
        h('div', {class: 'spacer'}),
        e.truncated ? h('span', {class: 'log-cut', title: 'The stream wrote more than is kept: this is its end.'}, `last ${bytes(new TextEncoder().encode(e.text || '').length)} of ${bytes(Number(e.totalBytes) || 0)}`) : null,
        h('span', {class: 'muted small', title: fullTime(e.time)}, when(e.time))),
      h('pre', {class: 'log-text'}, e.text || ''));
  }

  // Live: follow the watch stream, refreshing the execution's state as events land.
  const refresh = throttle(async () => {
    try {
      x = (await api(`/v1/executions/${encodeURIComponent(id)}`, {signal})).execution;
    } catch (e) {
      if (e.name === 'AbortError') return;
    }
    drawHead();
    drawTabs();
    if (tab === 'events' && body.querySelector('#event-filter') === document.activeElement) return;
    drawBody();
  }, 400);

  drawHead();
  drawTabs();
  drawBody();

  if (execStatus(x.status) === 'running') {
    const last = events.length ? events[events.length - 1].seq : 0;
    watch(id, truncated ? x.lastSeq : last, (e) => {
      if (!truncated) events.push(e);
      refresh();
      if (e.payload && e.payload.logs && (logs || tab === 'logs')) reloadLogs();
      if (TERMINAL.has(e.type)) clearInterval(ticker);
    }, signal).catch((e) => mount(actionMsg, errorBox(e, 'live updates stopped'))).finally(() => refresh());
    ticker = setInterval(() => {
      const d = head.querySelector('#exec-duration');
      if (d && execStatus(x.status) === 'running') d.textContent = duration(Date.now() - ms(x.startTime));
    }, 1000);
  }
  // The timeline is drawn to the page's width: redraw it when that changes.
  const onResize = throttle(() => {
    const w = body.querySelector('#timeline')?.clientWidth;
    if (tab === 'timeline' && w && w !== tlWidth) drawTimelineTab();
  }, 200);
  window.addEventListener('resize', onResize);
  return () => { controller.abort(); clearInterval(ticker); window.removeEventListener('resize', onResize); };
}

function columnNames(v) {
  const cols = v.columns || [];
  if (cols.length) return cols.map((c) => (typeof c === 'string' ? c : c.name));
  const first = (v.rows || [])[0];
  return first && typeof first === 'object' && !Array.isArray(first) ? Object.keys(first) : [];
}

function cell(v) {
  if (v === null || v === undefined) return h('span', {class: 'j-null'}, 'null');
  if (typeof v === 'object') return h('span', {class: 'mono small'}, JSON.stringify(v));
  return String(v);
}

/** table draws a page {columns, rows, offset, total_rows} of a tabular result. */
function table(page, total, offset, go) {
  const cols = columnNames(page);
  const rows = page.rows || [];
  const last = offset + rows.length;
  // A column of numbers is right-aligned, its header too.
  const numeric = (k, c) => rows.length > 0 && rows.every((r) => { const v = Array.isArray(r) ? r[k] : r[c]; return v === null || v === undefined || typeof v === 'number'; });
  return h('div', {class: 'result-table'},
    h('div', {class: 'table-wrap'},
      h('table', {class: 'table data', dataset: {offset}},
        h('thead', {}, h('tr', {}, h('th', {class: 'num'}, '#'), cols.map((c, k) => h('th', {class: numeric(k, c) ? 'num' : ''}, c)))),
        h('tbody', {}, rows.map((r, i) => h('tr', {}, h('td', {class: 'num muted'}, offset + i + 1),
          cols.map((c, k) => h('td', {class: typeof (Array.isArray(r) ? r[k] : r[c]) === 'number' ? 'num' : ''}, cell(Array.isArray(r) ? r[k] : r[c])))))))),
    h('div', {class: 'pager'},
      h('button', {type: 'button', class: 'btn', disabled: offset === 0, dataset: {rows: 'prev'}, onclick: () => go(Math.max(0, offset - TABLE_PAGE))}, '← Previous'),
      h('span', {class: 'muted', dataset: {rowsShown: `${offset + 1}-${last}`}}, rows.length ? `Rows ${count(offset + 1)}–${count(last)} of ${count(total)}` : 'No rows'),
      h('button', {type: 'button', class: 'btn', disabled: last >= total, dataset: {rows: 'next'}, onclick: () => go(offset + TABLE_PAGE)}, 'Next →')));
}

