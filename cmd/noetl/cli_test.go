package main

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorLine(t *testing.T) {
	require.Equal(t, "step a: bad (InvalidArgument)", errorLine(status.Error(codes.InvalidArgument, "step a: bad")))
	require.Equal(t, "register x.yaml: step a: bad (InvalidArgument)",
		errorLine(status.Error(codes.InvalidArgument, "register x.yaml: step a: bad")))
	require.Equal(t, "plain", errorLine(errors.New("plain")))
	require.Equal(t, "wrapped: inner (NotFound)", errorLine(fmt.Errorf("wrapped: %w", status.Error(codes.NotFound, "inner"))),
		"a wrapped status keeps the wrapper's words")
}

func TestEmitDoesNotEscapeHTML(t *testing.T) {
	var b bytes.Buffer
	emitTo(&b, map[string]string{"error": "a < b && c > d"})
	require.Equal(t, "{\n  \"error\": \"a < b && c > d\"\n}\n", b.String())
}

func TestVersionCommand(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	require.NoError(t, root.Execute())
	require.Regexp(t, regexp.MustCompile(`^noetl \S+ \(commit \S+.*, go1\.\d+.* \w+/\w+\)\n$`), out.String())
}
