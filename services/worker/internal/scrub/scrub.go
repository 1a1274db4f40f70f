// Package scrub removes the secrets a worker resolved for a command from everything the
// command produces before it leaves the worker: the result (inline or by reference), the
// events' payloads and errors, span errors and the worker's log lines.
//
// One Scrubber serves one command. Each credential the worker resolves for the command
// adds its secret fields (tokens, passwords, the password inside a connection string, the
// basic-auth pair, header values) in every form a remote party is likely to echo them back
// in: raw, base64 (standard and URL alphabets, padded or not), URL query- and
// path-escaped, and JSON-escaped. Every occurrence is replaced by Mask.
//
// The replacement is leftmost-longest over the command's few patterns (tens at most). The
// standard library's strings.Replacer would do the replacing but cannot count it, and the
// count feeds a metric, so the scan is written here: a quick strings.Contains test per
// pattern rejects the usual string that holds no secret, and only a string with a match
// is rebuilt.
package scrub

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Mask replaces every occurrence of a secret.
const Mask = "***"

// MinLen is the shortest secret (in bytes) that is scrubbed. Shorter values are skipped:
// replacing every "ab" or "123" in a result would mangle ordinary text and numbers while
// protecting little, since a secret that short can be guessed anyway. A basic-auth pair
// (user:password) counts as one value, so its encoded forms are scrubbed even when the
// password alone is shorter.
const MinLen = 4

// Counter is what the scrubber reports its replacements to (a prometheus.Counter).
type Counter interface{ Add(float64) }

// Scrubber replaces the secrets added to it. The zero value and nil scrub nothing; all
// methods are safe for concurrent use.
type Scrubber struct {
	counter Counter
	total   atomic.Int64

	mu       sync.RWMutex
	seen     map[string]bool
	patterns []string // longest first; replaced as a whole when a secret is added
}

// New returns an empty scrubber that adds the number of replacements it makes to counter
// (nil: none).
func New(counter Counter) *Scrubber { return &Scrubber{counter: counter} }

// Scrubbed returns how many occurrences the scrubber has replaced.
func (s *Scrubber) Scrubbed() int64 {
	if s == nil {
		return 0
	}
	return s.total.Load()
}

// Empty reports whether the scrubber holds no secret.
func (s *Scrubber) Empty() bool { return len(s.snapshot()) == 0 }

func (s *Scrubber) snapshot() []string {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.patterns
}

func (s *Scrubber) add(forms ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	next := s.patterns
	changed := false
	for _, f := range forms {
		if len(f) < MinLen || s.seen[f] {
			continue
		}
		s.seen[f] = true
		if !changed {
			next = append([]string(nil), s.patterns...)
			changed = true
		}
		next = append(next, f)
	}
	if !changed {
		return
	}
	// Longest first: at one position the longest form wins (a padded base64 form over its
	// unpadded prefix), so no fragment of a longer form is left behind.
	sort.SliceStable(next, func(i, j int) bool { return len(next[i]) > len(next[j]) })
	s.patterns = next
}

// AddSecret adds a secret value in its raw, base64, URL-escaped and JSON-escaped forms.
// A value shorter than MinLen is ignored.
func (s *Scrubber) AddSecret(v string) {
	if s == nil || len(v) < MinLen {
		return
	}
	s.add(Forms(v)...)
}

// AddBasic adds a basic-auth pair: the password, and user:password in every form (the
// Authorization header carries its base64). A pair without a password is not secret.
func (s *Scrubber) AddBasic(user, password string) {
	if s == nil || password == "" {
		return
	}
	s.AddSecret(password)
	s.AddSecret(user + ":" + password)
}

// Forms returns v and the encodings of v a server may echo it back in: base64 (standard
// and URL alphabets, padded and raw), URL query- and path-escaped, JSON-escaped (with and
// without HTML escaping), without duplicates.
func Forms(v string) []string {
	out := []string{v,
		base64.StdEncoding.EncodeToString([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)),
		base64.URLEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v)),
		url.QueryEscape(v), url.PathEscape(v),
	}
	if b, err := json.Marshal(v); err == nil {
		out = append(out, string(b[1:len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		out = append(out, string(b[1:len(b)-1]))
	}
	seen := map[string]bool{}
	uniq := out[:0]
	for _, f := range out {
		if !seen[f] {
			seen[f] = true
			uniq = append(uniq, f)
		}
	}
	return uniq
}

// AddCredential adds the secret fields of a resolved credential's data: every value under
// a key that names a secret (token, password, secret, api_key, private_key, ...), every
// value under headers, the password of a connection string (connection_string, dsn, url),
// and the basic-auth pair of username (or user) and password. Names, hosts, ports and
// other plain fields are left alone: scrubbing "postgres" or "localhost" from results
// would destroy them.
func (s *Scrubber) AddCredential(data map[string]any) {
	if s == nil || data == nil {
		return
	}
	s.addFields(data, false)
	user := firstString(data, "username", "user", "login")
	if pass := firstString(data, "password", "passwd", "pass"); pass != "" {
		s.AddBasic(user, pass)
	}
}

func (s *Scrubber) addFields(m map[string]any, all bool) {
	for k, v := range m {
		secret := all || secretKey(k)
		switch x := v.(type) {
		case string:
			if secret {
				s.addHeaderish(x)
			}
			if dsnKey(k) {
				for _, p := range dsnPasswords(x) {
					s.AddSecret(p)
				}
			}
		case map[string]any:
			s.addFields(x, secret || strings.EqualFold(k, "headers"))
		case []any:
			for _, e := range x {
				switch y := e.(type) {
				case string:
					if secret {
						s.addHeaderish(y)
					}
				case map[string]any:
					s.addFields(y, secret)
				}
			}
		case nil, bool:
		default: // a number given as a secret (a PIN)
			if secret {
				s.AddSecret(fmt.Sprint(x))
			}
		}
	}
}

// addHeaderish adds a secret value and, for one shaped like an Authorization header
// ("Bearer xyz", "Basic ..."), the credential after the scheme too.
func (s *Scrubber) addHeaderish(v string) {
	s.AddSecret(v)
	if scheme, rest, ok := strings.Cut(v, " "); ok && scheme != "" && !strings.ContainsFunc(scheme, unicode.IsSpace) {
		s.AddSecret(strings.TrimSpace(rest))
	}
}

// secretKey reports whether a credential field's name says it holds a secret.
func secretKey(k string) bool {
	n := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return -1
	}, k)
	switch n {
	case "key", "pass", "pin", "auth", "pwd":
		return true
	}
	for _, w := range []string{"password", "passwd", "passphrase", "secret", "token", "apikey", "privatekey", "accesskey", "signingkey", "credential", "authorization", "cookie", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// dsnKey reports whether a credential field holds a connection string.
func dsnKey(k string) bool {
	switch strings.ToLower(k) {
	case "connection_string", "connection_url", "connstr", "conn_string", "dsn", "url", "uri", "database_url", "db_url":
		return true
	}
	return false
}

var kvPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)`)

// dsnPasswords returns the password of a URL (postgres://u:p@h/db, or ?password=) or
// keyword/value (host=h password='p q') connection string, decoded and as written.
func dsnPasswords(dsn string) []string {
	var out []string
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
			if _, written, ok := strings.Cut(u.User.String(), ":"); ok {
				out = append(out, written)
			}
		}
		if p := u.Query().Get("password"); p != "" {
			out = append(out, p)
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			out = append(out, v[1:len(v)-1])
			v = strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v[1 : len(v)-1])
		}
		out = append(out, v)
	}
	return out
}

func firstString(m map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// String returns in with every secret replaced by Mask.
func (s *Scrubber) String(in string) string {
	out, _ := s.replace(in)
	return out
}

// replace scrubs in, returning the result and the number of replacements.
func (s *Scrubber) replace(in string) (string, int) {
	pats := s.snapshot()
	if len(pats) == 0 || len(in) < MinLen {
		return in, 0
	}
	var b strings.Builder
	pos, n := 0, 0
	scan(in, pats, func(at, end int) {
		if n == 0 {
			b.Grow(len(in))
		}
		b.WriteString(in[pos:at])
		b.WriteString(Mask)
		pos = end
		n++
	})
	if n == 0 {
		return in, 0
	}
	b.WriteString(in[pos:])
	s.count(n)
	return b.String(), n
}

// Tail returns in without its first from bytes, every secret in the rest replaced by
// Mask. It is for the tail of a longer text (the last bytes a tool wrote): when from is
// positive, in may start with the end of a secret whose head was cut off, which no
// pattern matches, so from is raised to at least the longest secret form's length, past
// any secret that begins before it, and to the start of a UTF-8 sequence. With from zero
// it is String.
func (s *Scrubber) Tail(in string, from int) string {
	pats := s.snapshot()
	if from <= 0 {
		return s.String(in)
	}
	if len(pats) > 0 {
		from = max(from, len(pats[0])) // longest first
	}
	for from < len(in) && !utf8.RuneStart(in[from]) {
		from++
	}
	if from >= len(in) {
		return ""
	}
	var b strings.Builder
	pos, n := from, 0
	scan(in, pats, func(at, end int) {
		n++
		if at < pos {
			// Inside the cut (or straddling it): dropped whole with what precedes it.
			pos = max(pos, end)
			return
		}
		b.WriteString(in[pos:at])
		b.WriteString(Mask)
		pos = end
	})
	if pos < len(in) {
		b.WriteString(in[pos:])
	}
	s.count(n)
	return b.String()
}

// scan calls match with the start and end of every occurrence of pats (longest first) in
// in, leftmost-longest, in order, non-overlapping.
func scan(in string, pats []string, match func(at, end int)) {
	hit := -1
	for i, p := range pats {
		if strings.Contains(in, p) {
			hit = i
			break
		}
	}
	if hit < 0 {
		return
	}
	// next[i] is where pattern i next occurs at or after the scan position, or -1 once it
	// does not occur any more; each is searched again only when the scan passes it.
	next := make([]int, len(pats))
	for i, p := range pats {
		if i < hit {
			next[i] = -1
		} else {
			next[i] = strings.Index(in, p)
		}
	}
	pos := 0
	for {
		best := -1
		for i, p := range pats {
			if next[i] >= 0 && next[i] < pos {
				if j := strings.Index(in[pos:], p); j >= 0 {
					next[i] = pos + j
				} else {
					next[i] = -1
				}
			}
			// Strictly earlier wins; at the same position the longer pattern, listed first.
			if next[i] >= 0 && (best < 0 || next[i] < next[best]) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		match(next[best], next[best]+len(pats[best]))
		pos = next[best] + len(pats[best])
	}
}

func (s *Scrubber) count(n int) {
	if n == 0 {
		return
	}
	s.total.Add(int64(n))
	if s.counter != nil {
		s.counter.Add(float64(n))
	}
}

// contains reports whether in holds a secret, without counting.
func (s *Scrubber) contains(in string) bool {
	for _, p := range s.snapshot() {
		if strings.Contains(in, p) {
			return true
		}
	}
	return false
}

// Bytes returns b with every secret replaced (b itself when it holds none).
func (s *Scrubber) Bytes(b []byte) []byte {
	if len(b) == 0 || s.Empty() {
		return b
	}
	out, n := s.replace(string(b))
	if n == 0 {
		return b
	}
	return []byte(out)
}

// JSON scrubs a JSON document and keeps it valid: a document holding a secret is decoded,
// scrubbed value by value (keys and strings) and encoded again. Should a secret still
// show, spanning the document's syntax, or the document not decode, the bytes are
// scrubbed as text: keeping the secret out matters more than keeping such a document.
func (s *Scrubber) JSON(b []byte) []byte {
	if len(b) == 0 || !s.contains(string(b)) {
		return b
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return s.Bytes(b)
	}
	out, err := json.Marshal(s.Value(v))
	if err != nil {
		return s.Bytes(b)
	}
	return s.Bytes(out)
}

// Value scrubs a JSON-shaped value (what tools return: maps, slices, strings, numbers):
// strings and map keys. Maps and slices of any are scrubbed in place; other containers
// are copied. Numbers and booleans are kept. A value of another type goes through its
// JSON encoding when that encoding holds a secret. A table result is made into Arrow
// from this value, so its string cells and column names are scrubbed too.
func (s *Scrubber) Value(v any) any {
	if s.Empty() {
		return v
	}
	return s.value(v)
}

func (s *Scrubber) value(v any) any {
	switch x := v.(type) {
	case nil, bool, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, json.Number:
		return v
	case string:
		return s.String(x)
	case []byte:
		return s.Bytes(x)
	case map[string]any:
		var renamed []string
		for k, e := range x {
			x[k] = s.value(e)
			if s.contains(k) {
				renamed = append(renamed, k)
			}
		}
		for _, k := range renamed {
			e := x[k]
			delete(x, k)
			x[s.String(k)] = e
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = s.value(e)
		}
		return x
	case []string:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = s.String(e)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, e := range x {
			out[s.String(k)] = s.String(e)
		}
		return out
	case map[string][]string:
		out := make(map[string][]string, len(x))
		for k, e := range x {
			out[s.String(k)] = s.value(e).([]string)
		}
		return out
	case []map[string]any:
		for _, e := range x {
			s.value(e)
		}
		return x
	}
	b, err := json.Marshal(v)
	if err != nil || !s.contains(string(b)) {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var decoded any
	if dec.Decode(&decoded) != nil {
		return s.String(string(b))
	}
	return s.value(decoded)
}

// Err returns err with its message scrubbed, still wrapping err for errors.Is and
// errors.As; nil for nil.
func (s *Scrubber) Err(err error) error {
	if err == nil {
		return nil
	}
	msg, n := s.replace(err.Error())
	if n == 0 {
		return err
	}
	return &scrubbedError{msg: msg, err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// Handler wraps a log handler so that every record's message and attributes (strings,
// errors, values logged as JSON) are scrubbed before h sees them.
func (s *Scrubber) Handler(h slog.Handler) slog.Handler { return &handler{h: h, s: s} }

type handler struct {
	h slog.Handler
	s *Scrubber
}

func (l *handler) Enabled(ctx context.Context, level slog.Level) bool { return l.h.Enabled(ctx, level) }

func (l *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, l.s.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(l.s.attr(a))
		return true
	})
	return l.h.Handle(ctx, out)
}

func (l *handler) WithAttrs(as []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(as))
	for i, a := range as {
		scrubbed[i] = l.s.attr(a)
	}
	return &handler{h: l.h.WithAttrs(scrubbed), s: l.s}
}

func (l *handler) WithGroup(name string) slog.Handler {
	return &handler{h: l.h.WithGroup(name), s: l.s}
}

func (s *Scrubber) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, s.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, e := range g {
			out[i] = s.attr(e)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		x := v.Any()
		if err, ok := x.(error); ok {
			if msg, n := s.replace(err.Error()); n > 0 {
				return slog.String(a.Key, msg)
			}
			return slog.Attr{Key: a.Key, Value: v}
		}
		if st, ok := x.(fmt.Stringer); ok {
			if msg, n := s.replace(st.String()); n > 0 {
				return slog.String(a.Key, msg)
			}
		}
		return slog.Any(a.Key, s.Value(x))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
