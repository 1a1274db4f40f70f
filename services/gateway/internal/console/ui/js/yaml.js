// A line-by-line YAML highlighter for playbook sources: comments, keys, strings, numbers,
// booleans and null, list dashes and {{ templates }}. It only colours text (every piece
// stays a text node); it does not parse YAML.

import {h} from './dom.js';

const SCALAR = /^(true|false|null|~|yes|no|on|off)$/i;
const NUMBER = /^[-+]?(\d[\d_]*(\.\d*)?([eE][-+]?\d+)?|\.\d+|0x[0-9a-fA-F]+)$/;

/** templated splits text into plain runs and {{ ... }} / {% ... %} template runs. */
function templated(text, cls) {
  const out = [];
  const re = /(\{\{.*?\}\}|\{%.*?%\})/g;
  let last = 0;
  let m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(h('span', {class: cls}, text.slice(last, m.index)));
    out.push(h('span', {class: 'y-tpl'}, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push(h('span', {class: cls}, text.slice(last)));
  return out;
}

function value(text) {
  const t = text.trim();
  if (!t) return [text];
  if (t.startsWith('"') || t.startsWith("'")) return templated(text, 'y-str');
  if (t === '|' || t === '>' || /^[|>][-+]?\d*$/.test(t)) return [h('span', {class: 'y-punct'}, text)];
  if (SCALAR.test(t)) return [h('span', {class: 'y-bool'}, text)];
  if (NUMBER.test(t)) return [h('span', {class: 'y-num'}, text)];
  return templated(text, 'y-plain');
}

/** splitComment cuts a trailing # comment that is not inside quotes. */
function splitComment(line) {
  let q = '';
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (q) { if (c === q) q = ''; continue; }
    if (c === '"' || c === "'") q = c;
    else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) return [line.slice(0, i), line.slice(i)];
  }
  return [line, ''];
}

/** highlightLine returns the pieces of one line; block is true inside a | or > scalar. */
function highlightLine(line, block) {
  if (block) return templated(line, 'y-block');
  const [code, comment] = splitComment(line);
  const out = [];
  const m = /^(\s*)(- +)?(?:((?:"[^"]*"|'[^']*'|[^\s:#'"{}[\],][^:#]*?)\s*):(?=\s|$))?(.*)$/.exec(code);
  if (m) {
    const [, indent, dash, key, rest] = m;
    if (indent) out.push(indent);
    if (dash) out.push(h('span', {class: 'y-punct'}, dash));
    if (key !== undefined) out.push(h('span', {class: 'y-key'}, key), h('span', {class: 'y-punct'}, ':'));
    out.push(...value(rest));
  } else {
    out.push(code);
  }
  if (comment) out.push(h('span', {class: 'y-comment'}, comment));
  return out;
}

/** highlight renders YAML source with line numbers. */
export function highlight(src) {
  const lines = src.replace(/\n$/, '').split('\n');
  let blockIndent = -1;
  const rows = lines.map((line, i) => {
    const indent = line.length - line.trimStart().length;
    let inBlock = false;
    if (blockIndent >= 0) {
      if (line.trim() === '' || indent > blockIndent) inBlock = true;
      else blockIndent = -1;
    }
    const pieces = highlightLine(line, inBlock);
    if (!inBlock && /:\s*[|>][-+]?\d*\s*(#.*)?$/.test(line)) blockIndent = indent;
    return h('div', {class: 'code-line'}, h('span', {class: 'ln', 'aria-hidden': 'true'}, String(i + 1)), h('span', {class: 'lc'}, pieces.length ? pieces : '\u200b'));
  });
  return h('div', {class: 'code yaml', role: 'region', 'aria-label': 'Playbook source'}, rows);
}
