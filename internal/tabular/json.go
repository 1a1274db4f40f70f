package tabular

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// stringPiece is the length from which a string is escaped piece by piece, so that a long
// string is never held a second time whole in its escaped form.
const stringPiece = 64 << 10

// WriteJSON writes v to w as json.Marshal would, without building the whole text in
// memory: maps, lists and scalars of decoded JSON are written piece by piece (other types
// are marshalled whole, one value at a time). It returns the bytes written.
func WriteJSON(w io.Writer, v any) (int64, error) {
	jw := jsonWriters.Get().(*jsonWriter)
	defer jw.release()
	jw.cw = countWriter{w: w}
	err := writeValue(jw.bw, v)
	if err == nil {
		err = jw.bw.Flush()
	}
	return jw.cw.n, err
}

// jsonWriter is WriteJSON's buffer and byte count, kept in a pool: a result is written per
// step, and a fresh 64 KiB buffer each time was most of what writing a small one cost.
type jsonWriter struct {
	cw countWriter
	bw *bufio.Writer
}

var jsonWriters = sync.Pool{New: func() any {
	jw := &jsonWriter{}
	jw.bw = bufio.NewWriterSize(&jw.cw, 64<<10)
	return jw
}}

// release drops what a call left in jw (unflushed bytes after an error, a sticky error, the
// caller's writer) and returns it to the pool.
func (jw *jsonWriter) release() {
	jw.cw = countWriter{}
	jw.bw.Reset(&jw.cw)
	jsonWriters.Put(jw)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func writeValue(w *bufio.Writer, v any) error {
	switch x := v.(type) {
	case nil:
		_, err := w.WriteString("null")
		return err
	case bool:
		_, err := w.WriteString(strconv.FormatBool(x))
		return err
	case int64:
		_, err := w.WriteString(strconv.FormatInt(x, 10))
		return err
	case int:
		_, err := w.WriteString(strconv.Itoa(x))
		return err
	case string:
		return writeString(w, x, stringPiece)
	case json.Number:
		// What a decoded result holds (domain.DecodeJSON keeps numbers as written).
		if numberLiteral(string(x)) {
			_, err := w.WriteString(string(x))
			return err
		}
		return writeMarshal(w, x) // "" (written as 0) and the invalid (an error)
	case map[string]any:
		if x == nil {
			_, err := w.WriteString("null")
			return err
		}
		var small [16]string
		keys := small[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		_ = w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				_ = w.WriteByte(',')
			}
			if err := writeString(w, k, stringPiece); err != nil {
				return err
			}
			_ = w.WriteByte(':')
			if err := writeValue(w, x[k]); err != nil {
				return err
			}
		}
		return w.WriteByte('}')
	case []any:
		if x == nil {
			_, err := w.WriteString("null")
			return err
		}
		_ = w.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				_ = w.WriteByte(',')
			}
			if err := writeValue(w, e); err != nil {
				return err
			}
		}
		return w.WriteByte(']')
	}
	return writeMarshal(w, v)
}

func writeMarshal(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// writeString writes s as json.Marshal would, escaping at most about piece bytes at a
// time. Pieces are cut before a byte that starts a rune (a continuation byte never
// belongs to one), so each piece escapes exactly as it does within the whole string.
func writeString(w *bufio.Writer, s string, piece int) error {
	if plainASCII(s) {
		_ = w.WriteByte('"')
		_, _ = w.WriteString(s)
		return w.WriteByte('"')
	}
	if len(s) <= piece {
		return writeMarshal(w, s)
	}
	if err := w.WriteByte('"'); err != nil {
		return err
	}
	for len(s) > 0 {
		n := min(len(s), piece)
		for n < len(s) && !utf8.RuneStart(s[n]) {
			n++
		}
		b, err := json.Marshal(s[:n])
		if err != nil {
			return err
		}
		if _, err := w.Write(b[1 : len(b)-1]); err != nil {
			return err
		}
		s = s[n:]
	}
	return w.WriteByte('"')
}

// plainASCII reports whether json.Marshal writes s unchanged between quotes: printable
// ASCII with nothing it escapes (the quote, the backslash, and <, >, & as HTML-safe JSON
// does).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// numberLiteral reports whether s is a JSON number (RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?
// ([eE][+-]?[0-9]+)?), which json.Marshal writes as it is.
func numberLiteral(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
