//go:build !wasip1

package pdk

// Outside a worker every host function answers "denied" with ErrNoHost's message.

var noHost = []byte(ErrNoHost.Error())

func hostInput() int32 { return statusFailed }
func hostReply(b []byte) int32 {
	return int32(copy(b, noHost))
}
func hostOutput([]byte) int32     { return statusFailed }
func hostFail([]byte)             {}
func hostLog(uint32, []byte)      {}
func hostHTTP([]byte) int32       { return statusFailed }
func hostKVGet([]byte) int32      { return statusFailed }
func hostKVPut(_, _ []byte) int32 { return statusFailed }
func hostResult([]byte) int32     { return statusFailed }
func hostWorkerInfo() int32       { return statusFailed }
