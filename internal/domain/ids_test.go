package domain

import (
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// Ids are part of the log: an id derived differently by a later build would break the
// deduplication of events already written. These were derived by the first implementation.
func TestIdsAreStableAcrossBuilds(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 300) // longer than any buffer on the stack
	for _, c := range []struct{ got, want string }{
		{CommandID("exec-1", "fetch", 1, -1, 1), "c8k4z3rn5hd5a2gq2kywgb49ejm"},
		{CommandID("", "", 0, 0, 0), "cxp8hwa210wnctxzdb5k9z2ad2m"},
		{CursorClaimID("exec-1", "page", 2, 3, 4), "cq87vefj0frsbsn5a6nak9ag0p4"},
		{CursorBodyID("exec-1", "page", 2, 3, 4, 5, 6), "ckh9cgajme2rypn740ja6es4n10"},
		{EventID("c123", EventCommandCompleted), "e336fgs46jh3qzj1r7e7pr7nnvr"},
		{EventID(StepEnterCause("exec-1", "s2", 7), EventStepEnter), "eparfmmgnd76dpg03jabcsp83hr"},
		{EventID(long, long), "ejnccyymjxmpjm8cjgm5kzawe70"},
	} {
		require.Equal(t, c.want, c.got)
	}
}

// BenchmarkIds derives a command's id and its outcome event's id, as each step does.
func BenchmarkIds(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = EventID(CommandID("01J9Z3W9M6V0ZB8Q3P4N5R6S7T", "fetch_page", 1, -1, 1), EventCommandCompleted)
	}
}

// referenceID is the id as first written: the tuple streamed into a SHA-256 part by part.
func referenceID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = h.Write([]byte(strconv.Itoa(len(p)) + ":"))
		_, _ = h.Write([]byte(p))
	}
	return prefix + idEncoding.EncodeToString(h.Sum(nil)[:16])
}

func TestDeriveIDMatchesTheStreamedHash(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.StringN(0, 200, -1), 0, 8).Draw(t, "parts")
		require.Equal(t, referenceID("e", parts...), deriveID('e', parts...))
	})
}
