package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/noetl/noetl/services/worker/internal/tools"
)

// HostModule is the import module of the host functions.
const HostModule = "noetl"

// Status codes the host functions return (a non-negative result is a length or zero).
const (
	// StatusNotFound: no such key (kv_get) or result.
	StatusNotFound int32 = -1
	// StatusDenied: the module's class lacks the capability, or the tool has it off.
	StatusDenied int32 = -2
	// StatusFailed: the request failed; the reply buffer holds the message.
	StatusFailed int32 = -3
)

// maxTransfer bounds one buffer passed to the host (an output, a request, a kv value).
const maxTransfer = 16 << 20

// maxLogBytes bounds what one call logs through log.
const maxLogBytes = 1 << 20

// maxKVValue bounds a kv value.
const maxKVValue = 1 << 20

// Class is a module's class: tenant modules (any path but system/...) run on the user
// pools, system modules (system/...) on the system pool with more capabilities.
type Class string

// The classes.
const (
	ClassTenant Class = "tenant"
	ClassSystem Class = "system"
)

// ClassOf returns the class of a module path.
func ClassOf(path string) Class {
	if path == "system" || len(path) > 7 && path[:7] == "system/" {
		return ClassSystem
	}
	return ClassTenant
}

// Capability is a group of host functions granted to some classes.
type Capability struct {
	// Name is the capability's name (docs/plugins.md lists them).
	Name string
	// Functions are the host functions it grants.
	Functions []string
	// Classes are the module classes granted it.
	Classes []Class
}

func (c Capability) grantedTo(class Class) bool { return slices.Contains(c.Classes, class) }

// Capabilities is the table of capabilities by class (docs/plugins.md shows it).
var Capabilities = []Capability{
	{"log", []string{"log"}, []Class{ClassTenant, ClassSystem}},
	{"io", []string{"input", "reply", "output", "fail"}, []Class{ClassTenant, ClassSystem}},
	{"http", []string{"http"}, []Class{ClassTenant, ClassSystem}},
	{"kv", []string{"kv_get", "kv_put"}, []Class{ClassTenant, ClassSystem}},
	{"result", []string{"result"}, []Class{ClassTenant, ClassSystem}},
	{"worker", []string{"worker_info"}, []Class{ClassSystem}},
}

func capabilityOf(fn string) (Capability, bool) {
	for _, c := range Capabilities {
		if slices.Contains(c.Functions, fn) {
			return c, true
		}
	}
	return Capability{}, false
}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// granted reports whether the call may use fn; a denied call leaves a message in reply.
func (st *callState) granted(fn string) bool {
	c, ok := capabilityOf(fn)
	if ok && c.grantedTo(st.class) {
		return true
	}
	st.reply = fmt.Appendf(nil, "%s: capability %s is not granted to %s modules", fn, c.Name, st.class)
	return false
}

// failed leaves err's message in reply and returns StatusFailed.
func (st *callState) fail(err error) int32 {
	st.reply = []byte(err.Error())
	return StatusFailed
}

// setReply puts b in the reply buffer and returns its length.
func (st *callState) setReply(b []byte) int32 {
	st.reply = b
	return int32(len(b))
}

var errMemory = errors.New("the buffer lies outside the module's memory or exceeds 16 MiB")

// hostModule defines the host functions (docs/plugins.md documents the ABI).
func hostModule(b wazero.HostModuleBuilder) wazero.HostModuleBuilder {
	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, level, ptr, n uint32) {
		st := stateOf(ctx)
		if st == nil || !st.granted("log") {
			return
		}
		msg, ok := read(m, ptr, n)
		if !ok || st.logBytes >= maxLogBytes {
			return
		}
		st.logBytes += len(msg)
		names := []string{"debug", "info", "warn", "error"}
		lvl := "info"
		if int(level) < len(names) {
			lvl = names[level]
		}
		_, _ = fmt.Fprintf(st.log.Stdout(), "[%s] %s\n", lvl, msg)
	}).Export("log")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("input") {
			return StatusDenied
		}
		in := st.input
		if in == nil {
			in = map[string]any{}
		}
		body, err := json.Marshal(in)
		if err != nil {
			return st.fail(err)
		}
		return st.setReply(body)
	}).Export("input")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, ptr, capacity uint32) int32 {
		st := stateOf(ctx)
		if st == nil {
			return StatusDenied
		}
		n := min(int(capacity), len(st.reply))
		if !m.Memory().Write(ptr, st.reply[:n]) {
			return StatusFailed
		}
		return int32(n)
	}).Export("reply")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, ptr, n uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("output") {
			return StatusDenied
		}
		out, ok := read(m, ptr, n)
		if !ok {
			return st.fail(errMemory)
		}
		if !json.Valid(out) {
			return st.fail(errors.New("output: not valid JSON"))
		}
		st.output, st.hasOut = out, true
		return 0
	}).Export("output")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, ptr, n uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("fail") {
			return StatusDenied
		}
		msg, _ := read(m, ptr, min(n, 4<<10))
		st.failed, st.failMsg = true, string(msg)
		if st.failMsg == "" {
			st.failMsg = "the module reported a failure"
		}
		return 0
	}).Export("fail")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, ptr, n uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("http") {
			return StatusDenied
		}
		if st.tool.cfg.HTTP == nil {
			st.reply = []byte("http: this worker offers no http")
			return StatusDenied
		}
		body, ok := read(m, ptr, n)
		if !ok {
			return st.fail(errMemory)
		}
		var req map[string]any
		if err := json.Unmarshal(body, &req); err != nil || req == nil {
			return st.fail(fmt.Errorf("http: the request is not a JSON object (method, url, headers, params, body)"))
		}
		// The http tool's egress policy, credentials and limits apply as to an http step.
		res, err := st.tool.cfg.HTTP.Run(ctx, &tools.Call{Kind: "http", Config: req, Input: map[string]any{}, Log: st.log})
		if err != nil {
			return st.fail(err)
		}
		out, err := json.Marshal(res)
		if err != nil {
			return st.fail(err)
		}
		return st.setReply(out)
	}).Export("http")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, kptr, klen uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("kv_get") {
			return StatusDenied
		}
		key, ok := read(m, kptr, klen)
		if !ok {
			return st.fail(errMemory)
		}
		v, found, err := st.tool.kv.get(ctx, st.tenant, string(key))
		if err != nil {
			return st.fail(err)
		}
		if !found {
			st.reply = nil
			return StatusNotFound
		}
		return st.setReply(v)
	}).Export("kv_get")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, kptr, klen, vptr, vlen uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("kv_put") {
			return StatusDenied
		}
		key, ok := read(m, kptr, klen)
		if !ok {
			return st.fail(errMemory)
		}
		if vlen > maxKVValue {
			return st.fail(fmt.Errorf("kv_put: a value of %d bytes exceeds the limit of %d", vlen, maxKVValue))
		}
		val, ok := read(m, vptr, vlen)
		if !ok {
			return st.fail(errMemory)
		}
		if err := st.tool.kv.put(ctx, st.tenant, string(key), val); err != nil {
			return st.fail(err)
		}
		return 0
	}).Export("kv_put")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context, m api.Module, ptr, n uint32) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("result") {
			return StatusDenied
		}
		if st.tool.cfg.LoadResult == nil {
			st.reply = []byte("result: this worker offers no result store")
			return StatusDenied
		}
		ref, ok := read(m, ptr, n)
		if !ok {
			return st.fail(errMemory)
		}
		body, err := st.tool.cfg.LoadResult(ctx, st.tenant, string(ref))
		if err != nil {
			return st.fail(fmt.Errorf("result %s: %w", ref, err))
		}
		return st.setReply(body)
	}).Export("result")

	b.NewFunctionBuilder().WithFunc(func(ctx context.Context) int32 {
		st := stateOf(ctx)
		if st == nil || !st.granted("worker_info") {
			return StatusDenied
		}
		out, _ := json.Marshal(map[string]any{"pool": st.tool.cfg.Pool, "worker": st.tool.cfg.WorkerID, "tenant": st.tenant})
		return st.setReply(out)
	}).Export("worker_info")
	return b
}

// kvKeyRE is what a kv key may be: NATS KV's key characters.
var kvKeyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]{1,256}$`)
