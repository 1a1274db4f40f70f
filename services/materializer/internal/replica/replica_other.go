//go:build !linux

package replica

// selfIncarnation cannot be read off this system: default replica ids carry zeros, and
// no predecessor is ever proven gone (leases expire instead).
func selfIncarnation() (start, pidns uint64) { return 0, 0 }

// processStart is unknown here.
func processStart(int) (uint64, bool) { return 0, true }
