//go:build !unix

package pgxext

import "net"

// polling is c: reads poll on Unix systems only (pollread_unix.go).
func polling(c net.Conn, _ int) net.Conn { return c }

// isPolling reports whether c's reads poll: never here.
func isPolling(net.Conn) bool { return false }
