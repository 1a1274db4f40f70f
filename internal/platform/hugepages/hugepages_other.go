//go:build !linux

package hugepages

// Heap does nothing on systems other than Linux: it returns ErrUnavailable.
func Heap(reserve int) error { return ErrUnavailable }
