package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Heartbeat ids derive from the command, its delivery and the beat: a replacement worker
// (another delivery) starts again at beat 1 under ids of its own, the same delivery
// retrying a publish repeats its id, and an empty delivery keeps the ids of logs written
// before deliveries were named.
func TestHeartbeatEventIDs(t *testing.T) {
	first, replacement, republished := HeartbeatDelivery(7, 1), HeartbeatDelivery(7, 2), HeartbeatDelivery(9, 1)
	require.Equal(t, "7.1", first)
	seen := map[string]string{}
	for _, d := range []string{"", first, replacement, republished} {
		for beat := int32(1); beat <= 3; beat++ {
			id := HeartbeatEventID("c1", d, beat)
			require.Equal(t, id, HeartbeatEventID("c1", d, beat), "derived, not drawn")
			require.NotContains(t, seen, id, "delivery %q beat %d repeats %s", d, beat, seen[id])
			seen[id] = d
			require.NotEqual(t, id, HeartbeatEventID("c2", d, beat), "another command's")
		}
	}
	require.Equal(t, EventID("c1", EventCommandHeartbeat+":1"), HeartbeatEventID("c1", "", 1), "the id of a log written before deliveries were named")
	require.NotEqual(t, HeartbeatEventID("c1", "1.1", 1), HeartbeatEventID("c1", "", 1))
}
