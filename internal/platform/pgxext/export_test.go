package pgxext

import "net"

// Polling reports whether c is a connection whose reads poll (pollread.go).
func Polling(c net.Conn) bool { return isPolling(c) }
