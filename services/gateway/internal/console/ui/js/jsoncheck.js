// jsonCheck finds where a JSON text stops being JSON, to word the error with its line and
// column (browsers' JSON.parse messages do not always say where).

/** jsonError returns null for valid JSON, else "line L, column C: what". */
export function jsonError(text) {
  let i = 0;
  const fail = (what) => { throw {at: i, what}; };
  const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
  const lit = (word) => { if (text.startsWith(word, i)) i += word.length; else fail('expected a value'); };
  const str = () => {
    i++;
    while (i < text.length) {
      const c = text[i];
      if (c === '"') { i++; return; }
      if (c === '\\') {
        const e = text[i + 1];
        if (e === 'u') { if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) fail('bad \\u escape'); i += 6; continue; }
        if (!'"\\/bfnrt'.includes(e)) fail('bad escape');
        i += 2;
        continue;
      }
      if (c < ' ') fail('control character in a string');
      i++;
    }
    fail('unterminated string');
  };
  const numb = () => {
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/.exec(text.slice(i));
    if (!m) fail('expected a value');
    i += m[0].length;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++; ws();
      if (text[i] === '}') { i++; return; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expected a "key"');
        str(); ws();
        if (text[i] !== ':') fail("expected ':'");
        i++;
        value(); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return; }
        fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      i++; ws();
      if (text[i] === ']') { i++; return; }
      for (;;) {
        value(); ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return; }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return str();
    if (c === 't') return lit('true');
    if (c === 'f') return lit('false');
    if (c === 'n') return lit('null');
    if (c === undefined) fail('unexpected end');
    return numb();
  };
  try {
    value(); ws();
    if (i < text.length) fail('unexpected text after the value');
    return null;
  } catch (e) {
    if (!e || e.at === undefined) throw e;
    const before = text.slice(0, e.at).split('\n');
    return `line ${before.length}, column ${before[before.length - 1].length + 1}: ${e.what}`;
  }
}
