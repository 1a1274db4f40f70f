package tools

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogKeepsTheTailOfEachStreamAndTheTotal(t *testing.T) {
	t.Parallel()
	l := NewLog(10)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				_, _ = l.Stdout().Write([]byte("0123456"))
			}
		}()
	}
	wg.Wait()
	_, _ = l.Stderr().Write([]byte("a whole line longer than ten\n"))
	_, _ = l.Stdout().Write([]byte("the end"))
	l.Diagnostic("GET %s -> %d", "/x", 200)
	got := l.Streams()
	require.Len(t, got, 3)
	require.Equal(t, Stream{Name: StreamStdout, Tail: []byte("456the end"), Total: 4*100*7 + 7}, got[0])
	require.Equal(t, Stream{Name: StreamStderr, Tail: []byte(" than ten\n"), Total: 29}, got[1])
	require.Equal(t, Stream{Name: StreamDiagnostic, Tail: []byte("/x -> 200\n"), Total: 14}, got[2])

	var none *Log // a call without a log discards
	none.Diagnostic("x")
	_, err := none.Stdout().Write([]byte("x"))
	require.NoError(t, err)
	require.Nil(t, none.Streams())
	require.Empty(t, NewLog(4).Streams(), "streams never written are left out")
}

func TestPythonAndShellWriteTheirStreamsToTheLog(t *testing.T) {
	t.Parallel()
	l := NewLog(1 << 10)
	_, err := (&Python{}).Run(context.Background(), &Call{Log: l, Config: map[string]any{
		"code": "import sys\nprint('hello from python')\nprint('careful', file=sys.stderr)\nresult = 1\n"}})
	require.NoError(t, err)
	got := l.Streams()
	require.Len(t, got, 2)
	require.Equal(t, "hello from python\n", string(got[0].Tail))
	require.Equal(t, "careful\n", string(got[1].Tail))

	l = NewLog(1 << 10)
	_, err = (&Shell{Enabled: true}).Run(context.Background(), &Call{Log: l, Config: map[string]any{
		"command": "echo out; echo err >&2; exit 3", "capture": false}})
	require.ErrorContains(t, err, "exit code 3")
	got = l.Streams()
	require.Len(t, got, 2, "without capture the logs still get both streams")
	require.Equal(t, "out\n", string(got[0].Tail))
	require.Equal(t, "err\n", string(got[1].Tail))
}

func TestHTTPDiagnosticLeavesQueryValuesOut(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = fmt.Fprint(w, "short and stout")
	}))
	defer srv.Close()
	l := NewLog(1 << 10)
	_, err := (&HTTP{Egress: EgressLoopback}).Run(context.Background(), &Call{Log: l, CommandID: "c", Config: map[string]any{
		"url": srv.URL + "/brew?api_key=QUERY-SECRET-1", "params": map[string]any{"token": "QUERY-SECRET-2"}}})
	require.NoError(t, err)
	got := l.Streams()
	require.Len(t, got, 1)
	line := string(got[0].Tail)
	require.Equal(t, StreamDiagnostic, got[0].Name)
	require.True(t, strings.HasPrefix(line, "GET "+srv.URL+"/brew?api_key&token (query values not logged) -> 418 I'm a teapot in "), line)
	require.True(t, strings.HasSuffix(line, ", 15 bytes\n"), line)
	require.NotContains(t, line, "SECRET")
}
