package scrub

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const secret = "S3NT1NEL/t0k+en&x=y\"q"

type counter struct{ n float64 }

func (c *counter) Add(v float64) { c.n += v }

func TestEveryFormOfASecretIsMasked(t *testing.T) {
	c := &counter{}
	s := New(c)
	s.AddSecret(secret)
	jsonEsc, _ := json.Marshal(secret)
	for name, form := range map[string]string{
		"raw":         secret,
		"base64":      base64.StdEncoding.EncodeToString([]byte(secret)),
		"base64 raw":  base64.RawStdEncoding.EncodeToString([]byte(secret)),
		"base64 url":  base64.URLEncoding.EncodeToString([]byte(secret)),
		"base64 rurl": base64.RawURLEncoding.EncodeToString([]byte(secret)),
		"query":       url.QueryEscape(secret),
		"path":        url.PathEscape(secret),
		"json":        string(jsonEsc[1 : len(jsonEsc)-1]),
	} {
		got := s.String("before " + form + " after")
		require.Equal(t, "before *** after", got, name)
	}
	require.EqualValues(t, 8, s.Scrubbed())
	require.EqualValues(t, 8, c.n)
	require.Equal(t, "nothing here", s.String("nothing here"))
	require.EqualValues(t, 8, s.Scrubbed(), "a string without a secret counts nothing")
}

func TestReplacementIsLeftmostLongestAndCounted(t *testing.T) {
	s := New(nil)
	s.AddSecret("abcd")
	s.AddSecret("abcdefgh")
	s.AddSecret("efgh")
	got, n := s.replace("xabcdefghy abcd efghabcd abcdabcd")
	require.Equal(t, "x***y *** ****** ******", got)
	require.Equal(t, 6, n)
	// A padded base64 form wins over its unpadded prefix: no stray '='.
	s = New(nil)
	s.AddSecret("hello")
	require.Equal(t, "Basic ***", s.String("Basic "+base64.StdEncoding.EncodeToString([]byte("hello"))))
}

func TestShortValuesAreNotScrubbed(t *testing.T) {
	s := New(nil)
	s.AddSecret("abc")
	s.AddSecret("")
	require.True(t, s.Empty())
	require.Equal(t, "abc abc", s.String("abc abc"))
	// A short password still protects its basic-auth pair.
	s.AddBasic("admin", "pw")
	pair := base64.StdEncoding.EncodeToString([]byte("admin:pw"))
	require.Equal(t, "Basic ***", s.String("Basic "+pair))
	require.Equal(t, "pw", s.String("pw"))
}

func TestCredentialFields(t *testing.T) {
	s := New(nil)
	s.AddCredential(map[string]any{
		"type":              "postgres",
		"host":              "db.internal",
		"port":              "5432",
		"username":          "noetl",
		"password":          "pa55word",
		"token":             "tok-123456",
		"client_secret":     "cs-abcdef",
		"pin":               float64(987654),
		"headers":           map[string]any{"X-Api-Key": "k-zyxwvu", "Authorization": "Bearer hdr-tok-1"},
		"connection_string": "postgres://app:dsn%2Fpass@db:5432/app?sslmode=disable",
		"dsn":               "host=db user=x password='kv pass\\'s' dbname=y",
		"oauth":             map[string]any{"refresh_token": "rt-555555", "scope": "read"},
	})
	text := strings.Join([]string{
		"db.internal", "5432", "noetl", "read", // plain fields stay
		"pa55word", "tok-123456", "cs-abcdef", "987654", "k-zyxwvu", "hdr-tok-1", "dsn/pass", "dsn%2Fpass", "kv pass's", "rt-555555",
		base64.StdEncoding.EncodeToString([]byte("noetl:pa55word")),
	}, "|")
	require.Equal(t, "db.internal|5432|noetl|read|***|***|***|***|***|***|***|***|***|***|***", s.String(text))
}

func TestValuesAreScrubbedDeeply(t *testing.T) {
	s := New(nil)
	s.AddSecret(secret)
	type custom struct{ Field string }
	v := map[string]any{
		"headers": map[string]any{"Authorization": []any{"Bearer " + secret}},
		secret:    "a key",
		"rows":    []any{map[string]any{"c": secret}, "plain", float64(3), nil, true},
		"strings": []string{secret},
		"bytes":   []byte("x" + secret),
		"custom":  custom{Field: secret},
		"hdr":     map[string][]string{"X": {secret}},
	}
	got := s.Value(v)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.NotContains(t, string(b), "S3NT1NEL")
	m := got.(map[string]any)
	require.Equal(t, "a key", m[Mask])
	require.Equal(t, []any{"Bearer ***"}, m["headers"].(map[string]any)["Authorization"])
	require.Equal(t, map[string]any{"Field": "***"}, m["custom"])
	require.Equal(t, []byte("x***"), m["bytes"])
	require.Equal(t, "plain", m["rows"].([]any)[1])
}

func TestJSONStaysValid(t *testing.T) {
	s := New(nil)
	s.AddSecret(`se"cret`)
	doc, _ := json.Marshal(map[string]any{"a": `x se"cret y`, "n": json.Number("12345678901234567890")})
	out := s.JSON(doc)
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&v), "%s", out)
	require.Equal(t, "x *** y", v["a"])
	require.Equal(t, json.Number("12345678901234567890"), v["n"], "numbers are kept exactly")
	same := []byte(`{"clean":true}`)
	require.Equal(t, same, s.JSON(same))
}

func TestLogsAndErrors(t *testing.T) {
	s := New(nil)
	var buf bytes.Buffer
	log := slog.New(s.Handler(slog.NewJSONHandler(&buf, nil))).With(slog.String("early", "k-abcdef"))
	s.AddSecret("k-abcdef") // added after the logger was made: still applies to later lines
	s.AddSecret("tok-9999")
	base := errors.New("auth failed for tok-9999")
	log.Warn("calling with tok-9999", slog.String("s", "tok-9999"), slog.Any("err", base),
		slog.Group("g", slog.String("inner", "tok-9999")), slog.Any("m", map[string]any{"x": "tok-9999"}))
	require.NotContains(t, buf.String(), "tok-9999")
	require.Contains(t, buf.String(), `"msg":"calling with ***"`)
	require.Contains(t, buf.String(), `"early":"k-abcdef"`, "attrs bound before the secret was known are not rewritten")

	err := s.Err(fmt.Errorf("wrapped: %w", base))
	require.Equal(t, "wrapped: auth failed for ***", err.Error())
	require.ErrorIs(t, err, base)
	require.NoError(t, s.Err(nil))
	plain := errors.New("plain")
	require.Same(t, plain, s.Err(plain))
}

func TestNilAndConcurrentUse(t *testing.T) {
	var s *Scrubber
	s.AddSecret("whatever")
	s.AddCredential(map[string]any{"token": "whatever"})
	require.Equal(t, "whatever", s.String("whatever"))
	require.Equal(t, "x", s.Value("x"))
	require.Zero(t, s.Scrubbed())

	s = New(&safeCounter{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.AddSecret(fmt.Sprintf("secret-%d", i))
		}()
		go func() {
			defer wg.Done()
			_ = s.String(fmt.Sprintf("secret-%d", i))
		}()
	}
	wg.Wait()
	require.Equal(t, "***", s.String("secret-7"))
}

type safeCounter struct {
	mu sync.Mutex
	n  float64
}

func (c *safeCounter) Add(v float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += v
}

func TestTailLeavesNoPartOfACutSecret(t *testing.T) {
	s := New(nil)
	s.AddSecret("hunter2-topsecret")
	longest := len(s.snapshot()[0])
	// A tail whose first bytes are the end of a secret (its head was cut off before): no
	// pattern matches "secret", so the cut is raised past the longest form.
	in := "2-topsecret" + strings.Repeat("x", longest) + " token hunter2-topsecret end\n"
	got := s.Tail(in, 1)
	require.NotContains(t, got, "topsecret")
	require.True(t, strings.HasSuffix(got, " token *** end\n"), got)
	require.Len(t, got, len(in)-longest-len("hunter2-topsecret")+len(Mask))

	// A secret straddling the cut is dropped whole, not left as a fragment.
	in = strings.Repeat("y", longest-3) + "hunter2-topsecret and more"
	require.Equal(t, " and more", s.Tail(in, longest))

	// The cut moves to the start of a UTF-8 sequence.
	in = strings.Repeat("z", longest-1) + "é tail"
	require.Equal(t, " tail", s.Tail(in, longest))
	require.Equal(t, "", s.Tail("short", 10))

	// From zero it is String, and a scrubber without secrets only cuts.
	require.Equal(t, "a *** b", s.Tail("a hunter2-topsecret b", 0))
	require.Equal(t, "cdef", New(nil).Tail("abcdef", 2))
}
