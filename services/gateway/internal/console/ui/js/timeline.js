// The timeline: a Gantt of the execution over wall time, from the event log's commit
// times (a command's start from its command.started's produce time, or the start time its outcome carries: see model). A row per step entry (a step entered again by a cycle gets a row per epoch), with
// its commands drawn over it: waiting for a worker (issued to started) hatched, running
// (started to done) solid, a retry's backoff dotted; a loop's row has a row per iteration
// under it. The slowest step is marked.

import {h, svg, ms, short, duration, stepStatus} from './dom.js';
import {iterationOf, enters} from './api.js';

const ROW = 26;
const BAR = 14;
const LABEL_W = 230;
const AXIS = 30;
const MAX_ITERATIONS = 100;

/** model reads the timeline out of an execution's events. */
export function model(events, execution) {
  const steps = new Map(); // "step\u0000epoch" -> row
  const order = [];
  const commands = new Map();
  let t0 = ms(execution.startTime);
  let t1 = execution.endTime ? ms(execution.endTime) : NaN;
  const rowOf = (step, epoch, t) => {
    const k = step + '\u0000' + epoch;
    let r = steps.get(k);
    if (!r) {
      r = {step, epoch, start: t, end: NaN, status: 'running', cmds: [], timers: [], iterations: new Map(), loop: false};
      steps.set(k, r);
      order.push(r);
    }
    return r;
  };
  const issue = (r, id, index, attempt, t) => {
    const c = {id, index, attempt: attempt || 1, issued: t, started: NaN, end: NaN, status: 'running'};
    commands.set(id, c);
    if (index >= 0) {
      if (!r.iterations.has(index)) r.iterations.set(index, []);
      r.iterations.get(index).push(c);
    } else {
      r.cmds.push(c);
    }
  };
  for (const e of events) {
    const t = ms(e.commitTime);
    const it = e.iteration || {};
    const epoch = it.epoch || 1;
    const index = iterationOf(e);
    switch (e.type) {
      case 'playbook.started':
        if (!Number.isFinite(t0) || t < t0) t0 = t;
        break;
      case 'playbook.completed': case 'playbook.failed': case 'playbook.cancelled':
        t1 = t;
        break;
      case 'step.enter': {
        const r = rowOf(e.step, epoch, t);
        r.start = t;
        r.loop = !!(e.payload && e.payload.loop);
        break;
      }
      case 'step.skipped': {
        const r = rowOf(e.step, epoch, t);
        r.end = t;
        r.status = 'skipped';
        break;
      }
      case 'step.exit': {
        const r = rowOf(e.step, epoch, t);
        r.end = t;
        if (r.status === 'running') r.status = 'completed';
        break;
      }
      case 'command.issued': {
        const r = rowOf(e.step, epoch, t);
        if (enters(e)) r.start = t; // a step of one command: its command enters it
        issue(r, e.commandId, index, e.attempt, t);
        break;
      }
      case 'commands.issued': {
        // A loop's iterations issued together: the payload lists their commands.
        const r = rowOf(e.step, epoch, t);
        for (const x of (e.payload && e.payload.commands) || []) issue(r, x.commandId, iterationOf(x), x.attempt, t);
        break;
      }
      case 'command.started': {
        // A worker reports command.started only for a command that runs a while; the time
        // it started is the event's produce time (the worker's clock, kept between the
        // issue and the end below).
        const c = commands.get(e.commandId);
        const p = ms(e.produceTime);
        if (c && !Number.isFinite(c.started)) c.started = Number.isFinite(p) ? p : t;
        break;
      }
      case 'command.completed': case 'command.failed': {
        const c = commands.get(e.commandId);
        if (c && !Number.isFinite(c.started)) {
          // A short command reports no command.started: its outcome carries when it began.
          const p = ms(e.startTime);
          if (Number.isFinite(p)) c.started = p;
        }
        if (c) {
          c.end = t;
          c.status = e.type === 'command.completed' ? 'completed' : 'failed';
          if (e.error && e.error.message) c.error = e.error.message;
        }
        break;
      }
      case 'timer.scheduled': {
        const r = rowOf(e.step, epoch, t);
        r.timers.push({start: t, end: NaN, attempt: e.attempt});
        break;
      }
      case 'timer.fired': {
        for (const r of order) {
          if (r.step !== e.step) continue;
          const open = r.timers.find((x) => !Number.isFinite(x.end));
          if (open) open.end = t;
        }
        break;
      }
      default:
    }
  }
  for (const c of commands.values()) {
    if (Number.isFinite(c.started)) c.started = Math.max(c.issued, Number.isFinite(c.end) ? Math.min(c.started, c.end) : c.started);
  }
  // A step that failed has no exit: its status is the execution state's.
  for (const r of order) {
    const s = stepStatus((execution.steps || {})[r.step]?.status);
    if (r.status === 'running' && s !== 'running' && s !== 'pending') r.status = s;
    if (r.status === 'running' && execution.status === 'EXECUTION_STATUS_CANCELLED') r.status = 'cancelled';
    if (!Number.isFinite(r.end)) {
      const ends = [...r.cmds, ...[...r.iterations.values()].flat()].map((c) => c.end).filter(Number.isFinite);
      if (r.status !== 'running' && ends.length) r.end = Math.max(...ends);
    }
  }
  order.sort((a, b) => a.start - b.start || a.step.localeCompare(b.step));
  return {rows: order, t0, t1};
}

/** niceStep is a tick interval giving about n ticks over span milliseconds. */
function niceStep(span, n) {
  const raw = span / n;
  const units = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000];
  return units.find((u) => u >= raw) || units[units.length - 1];
}

/** drawTimeline draws m (from model) width pixels wide; running executions end at now. */
export function drawTimeline(m, width, running) {
  const now = Date.now();
  const t0 = m.t0;
  const t1 = Number.isFinite(m.t1) && !running ? m.t1 : Math.max(now, ...m.rows.map((r) => r.end).filter(Number.isFinite));
  const span = Math.max(1, t1 - t0);
  const chartW = Math.max(200, width - LABEL_W - 90);
  const x = (t) => LABEL_W + ((t - t0) / span) * chartW;
  const end = (t) => (Number.isFinite(t) ? t : t1);

  // Rows: each step entry, then its loop iterations (at most MAX_ITERATIONS of them).
  const lines = [];
  let slowest = null;
  for (const r of m.rows) {
    const d = end(r.end) - r.start;
    if (r.status !== 'skipped' && (!slowest || d > slowest.d)) slowest = {r, d};
    lines.push({kind: 'step', r});
    if (r.loop || r.iterations.size) {
      const idx = [...r.iterations.keys()].sort((a, b) => a - b);
      for (const i of idx.slice(0, MAX_ITERATIONS)) lines.push({kind: 'iter', r, i, cmds: r.iterations.get(i)});
      if (idx.length > MAX_ITERATIONS) lines.push({kind: 'more', r, n: idx.length - MAX_ITERATIONS});
    }
  }
  const height = AXIS + lines.length * ROW + 8;
  const root = svg('svg', {class: 'timeline', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Timeline: ${m.rows.length} step entries over ${duration(span)}`});
  root.append(svg('defs', {},
    svg('pattern', {id: 'hatch', width: '6', height: '6', patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)'},
      svg('rect', {width: '6', height: '6', class: 'hatch-bg'}), svg('line', {x1: '0', y1: '0', x2: '0', y2: '6', class: 'hatch-line'}))));

  // Axis: ticks at a round interval, labelled as offsets from the start.
  const axis = svg('g', {class: 'axis'});
  const step = niceStep(span, Math.max(2, Math.floor(chartW / 110)));
  for (let t = 0; t <= span + 1e-9; t += step) {
    const xx = x(t0 + t);
    axis.append(svg('line', {x1: xx, x2: xx, y1: AXIS - 6, y2: height, class: 'tick'}),
      svg('text', {x: xx, y: AXIS - 11, 'text-anchor': t === 0 ? 'start' : 'middle'}, t === 0 ? 'start' : '+' + short(t)));
  }
  axis.append(svg('text', {x: 8, y: AXIS - 11, class: 'axis-title'}, 'step'));
  root.append(axis);

  lines.forEach((ln, k) => {
    const y = AXIS + k * ROW;
    const g = svg('g', {class: ['tl-row', ln.kind, ln.kind === 'step' && 's-' + ln.r.status, ln.kind === 'step' && slowest && slowest.r === ln.r && 'slowest'],
      dataset: {step: ln.r.step, kind: ln.kind}});
    if (k % 2 === 0) g.append(svg('rect', {class: 'stripe', x: 0, y, width, height: ROW}));
    const by = y + (ROW - BAR) / 2;
    if (ln.kind === 'more') {
      g.append(svg('text', {class: 'tl-label muted', x: 28, y: y + ROW / 2, 'dominant-baseline': 'central'}, `… ${ln.n} more iterations`));
      root.append(g);
      return;
    }
    const r = ln.r;
    const name = ln.kind === 'step' ? r.step + (r.epoch > 1 ? ` #${r.epoch}` : '') : `[${ln.i}]`;
    g.append(svg('text', {class: 'tl-label', x: ln.kind === 'step' ? 8 : 28, y: y + ROW / 2, 'dominant-baseline': 'central'},
      name.length > 28 ? name.slice(0, 27) + '…' : name, svg('title', {}, name)));
    let from; let to; let tip;
    if (ln.kind === 'step') {
      from = r.start; to = end(r.end);
      tip = `${r.step}${r.epoch > 1 ? ' (entry ' + r.epoch + ')' : ''}: ${r.status}, ${duration(to - from)}`;
      g.append(svg('rect', {class: 'tl-span', x: x(from), y: by, width: Math.max(2, x(to) - x(from)), height: BAR, rx: '3'}, svg('title', {}, tip)));
      for (const t of r.timers) {
        g.append(svg('rect', {class: 'tl-backoff', x: x(t.start), y: by + 3, width: Math.max(2, x(end(t.end)) - x(t.start)), height: BAR - 6},
          svg('title', {}, `backoff before attempt ${t.attempt}: ${duration(end(t.end) - t.start)}`)));
      }
      drawCommands(g, r.cmds, by, x, end);
    } else {
      const cs = ln.cmds;
      from = Math.min(...cs.map((c) => c.issued)); to = Math.max(...cs.map((c) => end(c.end)));
      drawCommands(g, cs, by, x, end);
    }
    const d = to - from;
    const label = (ln.kind === 'step' && r.status === 'skipped' ? 'skipped' : short(d)) + (ln.kind === 'step' && slowest && slowest.r === r && m.rows.length > 1 ? ' · slowest' : '');
    const tx = x(to) + 6;
    g.append(svg('text', {class: 'tl-dur', x: tx + 60 > width ? x(from) - 6 : tx, y: y + ROW / 2, 'dominant-baseline': 'central',
      'text-anchor': tx + 60 > width ? 'end' : 'start'}, label));
    root.append(g);
  });
  if (running) {
    const xx = x(now);
    root.append(svg('line', {class: 'now', x1: xx, x2: xx, y1: AXIS - 6, y2: height}), svg('text', {class: 'now-label', x: xx - 4, y: AXIS - 11, 'text-anchor': 'end'}, 'now'));
  }
  return root;
}

function drawCommands(g, cmds, by, x, end) {
  for (const c of cmds) {
    const started = Number.isFinite(c.started) ? c.started : end(c.end);
    const wait = started - c.issued;
    const tip = `attempt ${c.attempt}${c.index >= 0 ? ', iteration ' + c.index : ''}: ${c.status}; waited ${duration(wait)}, ran ${duration(end(c.end) - started)}${c.error ? '\n' + c.error : ''}`;
    if (wait > 0) g.append(svg('rect', {class: 'tl-wait', x: x(c.issued), y: by + 2, width: Math.max(1, x(started) - x(c.issued)), height: BAR - 4}, svg('title', {}, tip)));
    g.append(svg('rect', {class: ['tl-run', 'c-' + c.status], x: x(started), y: by + 2, width: Math.max(2, x(end(c.end)) - x(started)), height: BAR - 4, rx: '2',
      dataset: {attempt: c.attempt}}, svg('title', {}, tip)));
    if (c.attempt > 1) {
      g.append(svg('text', {class: 'tl-attempt', x: x(started) + 3, y: by - 1}, '#' + c.attempt));
    }
  }
}

/** legendTimeline explains the bars. */
export function legendTimeline() {
  return h('ul', {class: 'legend'},
    h('li', {class: 'tl-key span'}, h('span', {class: 'swatch'}), 'step entered → routed'),
    h('li', {class: 'tl-key wait'}, h('span', {class: 'swatch'}), 'issued, not started'),
    h('li', {class: 'tl-key run'}, h('span', {class: 'swatch'}), 'running'),
    h('li', {class: 'tl-key fail'}, h('span', {class: 'swatch'}), 'attempt failed'),
    h('li', {class: 'tl-key backoff'}, h('span', {class: 'swatch'}), 'retry backoff'));
}
