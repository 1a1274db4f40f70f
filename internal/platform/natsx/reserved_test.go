package natsx

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// What tenant code may not reach: the three streams and every NOETL_* one, the streams
// of reserved buckets, the mesh's subjects (built by this package's functions) and
// NATS's own.
func TestReservedNames(t *testing.T) {
	t.Parallel()
	for _, s := range []string{StreamEvents, StreamCommands, StreamCommitted, "noetl_future", "KV_noetl_sessions", "OBJ_NOETL_blobs"} {
		require.True(t, ReservedStream(s), s)
	}
	for _, s := range []string{"ORDERS", "KV_orders", "OBJ_files", "NOETLX"} {
		require.False(t, ReservedStream(s), s)
	}
	require.True(t, ReservedBucket("noetl_sessions"))
	require.True(t, ReservedBucket("NOETL"))
	require.False(t, ReservedBucket("orders"))
	require.True(t, ReservedConsumer("noetl-trigger-abc"))
	require.False(t, ReservedConsumer("billing"))
	for _, s := range []string{EventSubject("x", 4), CommandSubject("shared", "x", "c1", 4), CommittedSubject("x", 4), CancelSubject("x"), "NOETL.anything", "$JS.API.STREAM.DELETE.ORDERS", "$KV.noetl_sessions.k", "_INBOX.abc"} {
		require.True(t, ReservedSubject(s), s)
	}
	for _, s := range []string{"orders.created", "noetlx.a", "tenant.noetl.a"} {
		require.False(t, ReservedSubject(s), s)
	}
}
