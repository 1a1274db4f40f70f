//go:build wasip1

package pdk

import "unsafe"

//go:wasmimport noetl input
func wasmInput() int32

//go:wasmimport noetl reply
func wasmReply(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport noetl output
func wasmOutput(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport noetl fail
func wasmFail(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport noetl log
func wasmLog(level uint32, ptr unsafe.Pointer, n uint32)

//go:wasmimport noetl http
func wasmHTTP(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport noetl kv_get
func wasmKVGet(kptr unsafe.Pointer, klen uint32) int32

//go:wasmimport noetl kv_put
func wasmKVPut(kptr unsafe.Pointer, klen uint32, vptr unsafe.Pointer, vlen uint32) int32

//go:wasmimport noetl result
func wasmResult(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport noetl worker_info
func wasmWorkerInfo() int32

// ptr is the address of b's first byte (nil for an empty b).
func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func hostInput() int32           { return wasmInput() }
func hostReply(b []byte) int32   { return wasmReply(ptr(b), uint32(len(b))) }
func hostOutput(b []byte) int32  { return wasmOutput(ptr(b), uint32(len(b))) }
func hostFail(b []byte)          { wasmFail(ptr(b), uint32(len(b))) }
func hostLog(l uint32, b []byte) { wasmLog(l, ptr(b), uint32(len(b))) }
func hostHTTP(b []byte) int32    { return wasmHTTP(ptr(b), uint32(len(b))) }
func hostKVGet(k []byte) int32   { return wasmKVGet(ptr(k), uint32(len(k))) }
func hostKVPut(k, v []byte) int32 {
	return wasmKVPut(ptr(k), uint32(len(k)), ptr(v), uint32(len(v)))
}
func hostResult(b []byte) int32 { return wasmResult(ptr(b), uint32(len(b))) }
func hostWorkerInfo() int32     { return wasmWorkerInfo() }
