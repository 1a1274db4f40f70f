package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/services/worker/internal/tools"
	"github.com/noetl/noetl/services/worker/internal/wasm"
)

// WasmConfig is the configuration of the worker's tool kind wasm (package wasm).
type WasmConfig struct {
	// MemoryMB is the most linear memory one plug-in call may use, in MiB (zero:
	// wasm.DefaultMemoryLimit).
	MemoryMB int
	// Timeout is the longest one plug-in call may run (zero: wasm.DefaultTimeout).
	Timeout time.Duration
	// CacheModules bounds the compiled modules the worker keeps (zero:
	// wasm.DefaultCacheModules).
	CacheModules int
	// Engine is "compiler" (also when empty: modules compiled to machine code once per
	// digest) or "interpreter" (no compilation: cheaper loads, slower calls).
	Engine string
}

// checkEngine accepts the engines of NOETL_WASM_ENGINE.
func checkEngine(s string) error {
	if s != "compiler" && s != "interpreter" {
		return fmt.Errorf("must be compiler or interpreter")
	}
	return nil
}

// flags binds the wasm configuration to flags and NOETL_WASM_* env vars.
func (c *WasmConfig) flags(fs *config.FlagSet) {
	fs.Int(&c.MemoryMB, "wasm-memory", "NOETL_WASM_MEMORY_MB", wasm.DefaultMemoryLimit>>20, "most memory one WebAssembly plug-in call may use, in MiB (a module past it is stopped)", config.Positive)
	fs.Duration(&c.Timeout, "wasm-timeout", "NOETL_WASM_TIMEOUT", wasm.DefaultTimeout, "longest one WebAssembly plug-in call may run (a module past it is stopped)", config.Positive)
	fs.String(&c.Engine, "wasm-engine", "NOETL_WASM_ENGINE", "compiler", "how WebAssembly plug-ins run: compiler (machine code, compiled once per module) or interpreter", checkEngine)
	fs.Int(&c.CacheModules, "wasm-cache", "NOETL_WASM_CACHE_MODULES", wasm.DefaultCacheModules, "compiled WebAssembly modules the worker keeps, by digest", config.Positive)
}

// maxPluginMessage bounds a GetPlugin response carrying a module (the catalog keeps
// modules of up to 24 MiB).
const maxPluginMessage = 32 << 20

// wasmDeps are what kind: wasm needs beside the other tools: the orchestrator's
// PluginService and this worker's JetStream (the tenants' key-value buckets).
type wasmDeps struct {
	plugins orchv1.PluginServiceClient
	js      jetstream.JetStream
}

// newWasmTool is the worker's tool kind wasm: plug-ins read from the orchestrator's
// PluginService for the command's tenant, http through this worker's http tool (its
// egress policy), kv in the tenant's bucket on this worker's NATS, results through the
// resultstore (fetch).
func newWasmTool(cfg Config, http tools.Tool, fetch func(ctx context.Context, tenant, uri string) ([]byte, error), wd wasmDeps) *wasm.Tool {
	wc := wasm.Config{
		Pool: cfg.Pool, WorkerID: cfg.ID,
		MemoryLimit: cfg.Wasm.MemoryMB << 20, Timeout: cfg.Wasm.Timeout, CacheModules: cfg.Wasm.CacheModules,
		Interpreter: cfg.Wasm.Engine == "interpreter",
		Source:      wd.source,
		Tenant:      tools.TenantOf,
		HTTP:        http, JS: wd.js, KVReplicas: cfg.StreamReplicas,
		LoadResult: fetch,
	}
	return wasm.New(wc)
}

// source reads a plug-in version from the orchestrator.
func (wd wasmDeps) source(ctx context.Context, tenant, path string, version int64, withBytes bool) (*wasm.Module, error) {
	if wd.plugins == nil {
		return nil, &sourceError{status.Error(codes.Unavailable, "no orchestrator to read plug-ins from")}
	}
	resp, err := wd.plugins.GetPlugin(ctx, &orchv1.GetPluginRequest{Tenant: tenant, Path: path, Version: version, IncludeModule: withBytes},
		grpc.MaxCallRecvMsgSize(maxPluginMessage))
	if status.Code(err) == codes.NotFound {
		return nil, wasm.ErrNotFound
	}
	if err != nil {
		return nil, &sourceError{err}
	}
	p := resp.GetPlugin()
	return &wasm.Module{Path: p.GetPath(), Version: p.GetVersion(), Digest: p.GetContentSha256(), Bytes: p.GetModule()}, nil
}

// sourceError is a failed read of a plug-in: retryable while the orchestrator cannot be
// reached.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return status.Convert(e.err).Message() }

// Retryable reports whether the read may succeed later.
func (e *sourceError) Retryable() bool {
	c := status.Code(e.err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}
