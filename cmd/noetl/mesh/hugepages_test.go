package mesh

import "testing"

func TestAheadWithinKeepsToAnEighthOfAMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		want  int
		limit uint64
		ahead int
	}{
		{128 * mib, 0, 128 * mib},          // no limit
		{128 * mib, 4096 * mib, 128 * mib}, // a limit with room
		{128 * mib, 1024 * mib, 128 * mib}, // exactly an eighth
		{128 * mib, 512 * mib, 64 * mib},   // an eighth of a smaller limit
		{128 * mib, 100 * mib, 12 * mib},   // 12.5 MiB, in whole huge pages
		{128 * mib, 8 * mib, 0},            // under one huge page: nothing ahead
	} {
		if got := aheadWithin(c.want, c.limit); got != c.ahead {
			t.Errorf("aheadWithin(%d MiB, %d MiB) = %d MiB, want %d MiB", c.want/mib, c.limit/mib, got/mib, c.ahead/mib)
		}
	}
}
