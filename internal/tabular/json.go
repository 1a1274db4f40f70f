package tabular

import (
	"bufio"
	"encoding/json"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// stringPiece is the length from which a string is escaped piece by piece, so that a long
// string is never held a second time whole in its escaped form.
const stringPiece = 64 << 10

// WriteJSON writes v to w as json.Marshal would, without building the whole text in
// memory: maps, lists and scalars of decoded JSON are written piece by piece (other types
// are marshalled whole, one value at a time). It returns the bytes written.
func WriteJSON(w io.Writer, v any) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	if err := writeValue(bw, v); err != nil {
		return cw.n, err
	}
	err := bw.Flush()
	return cw.n, err
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
	case map[string]any:
		if x == nil {
			_, err := w.WriteString("null")
			return err
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		_ = w.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				_ = w.WriteByte(',')
			}
			if err := writeMarshal(w, k); err != nil {
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
