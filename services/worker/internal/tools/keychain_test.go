package tools

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The token cache holds at most MaxCached tokens: a full cache drops the expired ones,
// then the one due soonest; a token is handed out until a margin before its expiry.
func TestKeychainCacheIsBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := &Keychain{MaxCached: 2, Now: func() time.Time { return now }}
	k.store("a", map[string]any{"access_token": "a"}, time.Hour)
	k.store("b", map[string]any{"access_token": "b"}, 10*time.Minute)
	k.store("c", map[string]any{"access_token": "c"}, 2*time.Hour)
	require.Equal(t, 2, k.Cached())
	_, ok := k.cached("b")
	require.False(t, ok, "the token due soonest was dropped")
	got, ok := k.cached("a")
	require.True(t, ok)
	require.Equal(t, "a", got["access_token"])

	now = now.Add(time.Hour - time.Minute) // a's renewal point: one minute before expiry
	_, ok = k.cached("a")
	require.False(t, ok)
	_, ok = k.cached("c")
	require.True(t, ok)

	// A short-lived token is renewed a tenth of its lifetime before it expires.
	k.store("d", map[string]any{"access_token": "d"}, 10*time.Second)
	now = now.Add(8 * time.Second)
	_, ok = k.cached("d")
	require.True(t, ok)
	now = now.Add(time.Second)
	_, ok = k.cached("d")
	require.False(t, ok)
}
