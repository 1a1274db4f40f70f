// Package wasm is the worker's tool kind wasm: it runs a WebAssembly plug-in from the
// catalog (PluginService) on wazero, a pure-Go runtime, with the step's input as JSON and
// the module's output as the step's result.
//
// A plug-in is a WASI command (GOOS=wasip1 GOARCH=wasm go build): each call instantiates
// the module afresh, so calls share no memory, runs its _start under a memory limit and a
// wall-time limit (a module past either is stopped and the step fails naming the limit),
// and gives it only the host functions of its class (capabilities: tenant or system
// modules, see Capabilities). Compiled modules are cached by content digest, a bounded
// number of them; every call asks the catalog which version a path's latest (or pinned)
// version is, so a new version is run by the next command, with no restart, and the
// compiled form of the version it replaced is evicted.
package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

// Defaults of Config.
const (
	DefaultMemoryLimit  = 64 << 20
	DefaultTimeout      = 30 * time.Second
	DefaultCacheModules = 32
)

// Kind is the tool kind.
const Kind = "wasm"

// ErrNotFound is what a Source returns for a module the tenant has not registered.
var ErrNotFound = errors.New("plug-in not found")

// Module is one catalog version of a plug-in.
type Module struct {
	Path    string
	Version int64
	// Digest is the hex SHA-256 of Bytes.
	Digest string
	// Bytes is the WebAssembly binary (nil when not asked for).
	Bytes []byte
}

// Source reads a tenant's plug-in version (the latest when version is zero) from the
// catalog, with its bytes when withBytes; ErrNotFound when there is none. An error
// implementing Retryable() bool true (an unreachable catalog) makes the step retryable.
type Source func(ctx context.Context, tenant, path string, version int64, withBytes bool) (*Module, error)

// Config configures the tool.
type Config struct {
	// Pool is the worker's pool: system/ modules run only on "system", tenant modules
	// everywhere else.
	Pool string
	// WorkerID is reported to system modules (worker_info).
	WorkerID string
	// MemoryLimit is the most linear memory one call may use, in bytes (rounded down to
	// 64 KiB pages; zero: DefaultMemoryLimit).
	MemoryLimit int
	// Timeout is the longest one call may run (zero: DefaultTimeout); a command's own
	// deadline, when sooner, stops it first.
	Timeout time.Duration
	// CacheModules bounds the compiled modules kept (zero: DefaultCacheModules).
	CacheModules int
	// Source reads plug-ins from the catalog.
	Source Source
	// Tenant returns the tenant of the command a context runs.
	Tenant func(ctx context.Context) string
	// HTTP runs a plug-in's http requests (the worker's http tool, with its egress policy);
	// nil denies http.
	HTTP tools.Tool
	// JS holds the tenants' key-value buckets; nil denies kv.
	JS jetstream.JetStream
	// KVReplicas is the replication factor of the buckets (zero: 1).
	KVReplicas int
	// Interpreter runs modules in wazero's interpreter instead of compiling them to
	// machine code: slower calls, much cheaper loads (the tests use it under the race
	// detector, which slows the compiler tenfold).
	Interpreter bool
	// LoadResult reads a stored result by reference for the tenant; nil denies result.
	LoadResult func(ctx context.Context, tenant, ref string) ([]byte, error)
}

// Tool runs plug-ins (tool kind wasm).
type Tool struct {
	cfg   Config
	pages uint32

	once    sync.Once
	rt      wazero.Runtime
	initErr error

	cache *cache
	kv    *buckets
}

// New returns the tool; the runtime is made at its first call.
func New(cfg Config) *Tool {
	if cfg.MemoryLimit <= 0 {
		cfg.MemoryLimit = DefaultMemoryLimit
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheModules <= 0 {
		cfg.CacheModules = DefaultCacheModules
	}
	pages := uint32(max(cfg.MemoryLimit/65536, 1))
	return &Tool{cfg: cfg, pages: pages, cache: newCache(cfg.CacheModules), kv: &buckets{js: cfg.JS, replicas: cfg.KVReplicas}}
}

// init makes the runtime: compiled (or interpreted where wazero has no compiler), memory
// capped at the limit, every function stopped when its context ends, WASI and the noetl
// host module instantiated once for all calls.
func (t *Tool) init() {
	ctx := context.Background()
	rc := wazero.NewRuntimeConfig()
	if t.cfg.Interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rc = rc.WithMemoryLimitPages(t.pages).WithCloseOnContextDone(true)
	t.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, t.rt); err != nil {
		t.initErr = fmt.Errorf("wasm: instantiate WASI: %w", err)
		return
	}
	if _, err := hostModule(t.rt.NewHostModuleBuilder(HostModule)).Instantiate(ctx); err != nil {
		t.initErr = fmt.Errorf("wasm: instantiate the host module: %w", err)
	}
}

// Close releases the runtime and every compiled module.
func (t *Tool) Close(ctx context.Context) error {
	if t.rt == nil {
		return nil
	}
	return t.rt.Close(ctx)
}

// Cached returns the digests of the compiled modules the tool keeps.
func (t *Tool) Cached() []string { return t.cache.digests() }

// Limits returns the memory limit in bytes and the time limit one call has.
func (t *Tool) Limits() (memory int, timeout time.Duration) {
	return int(t.pages) * 65536, t.cfg.Timeout
}

func fail(format string, a ...any) error {
	return &tools.Error{Msg: "wasm: " + fmt.Sprintf(format, a...)}
}

// moduleRef reads the step's module and version.
func moduleRef(cfg map[string]any) (string, int64, error) {
	path, _ := cfg["module"].(string)
	path = strings.Trim(strings.TrimSpace(path), "/")
	if path == "" {
		return "", 0, fail("module is required: the plug-in's catalog path (noetl plugin register)")
	}
	var version int64
	switch v := cfg["version"].(type) {
	case nil:
	case int:
		version = int64(v)
	case int64:
		version = v
	case float64:
		version = int64(v)
	case interface{ Int64() (int64, error) }:
		n, err := v.Int64()
		if err != nil {
			return "", 0, fail("version: %v is not a whole number", v)
		}
		version = n
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return "", 0, fail("version: %q is not a whole number", v)
		}
		version = n
	default:
		return "", 0, fail("version: %v is not a whole number", v)
	}
	if version < 0 {
		return "", 0, fail("version: must be zero (the latest) or positive")
	}
	return path, version, nil
}

// Run implements tools.Tool.
func (t *Tool) Run(ctx context.Context, c *tools.Call) (any, error) {
	path, version, err := moduleRef(c.Config)
	if err != nil {
		return nil, err
	}
	class := ClassOf(path)
	switch {
	case class == ClassSystem && t.cfg.Pool != "system":
		return nil, fail("module %q is a system/ plug-in: it runs only on the system pool, not %q", path, t.cfg.Pool)
	case class == ClassTenant && t.cfg.Pool == "system":
		return nil, fail("module %q is a tenant plug-in: the system pool runs only system/ plug-ins", path)
	}
	t.once.Do(t.init)
	if t.initErr != nil {
		return nil, t.initErr
	}
	tenant := ""
	if t.cfg.Tenant != nil {
		tenant = t.cfg.Tenant(ctx)
	}
	if tenant == "" {
		return nil, fail("module %q: no tenant in scope", path)
	}
	e, meta, err := t.load(ctx, tenant, path, version)
	if err != nil {
		return nil, err
	}
	defer t.cache.release(e)
	if err := checkImports(e.compiled, class); err != nil {
		return nil, fail("module %q version %d: %v", path, meta.Version, err)
	}
	c.Log.Diagnostic("wasm: %s version %d (sha256 %s)", path, meta.Version, short(meta.Digest))
	return t.call(ctx, c, e.compiled, &callState{tool: t, tenant: tenant, class: class, input: c.Input, log: c.Log}, path, meta.Version)
}

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

type retryable interface{ Retryable() bool }

// load resolves the module's version in the catalog and returns its compiled form,
// compiling it on a miss; the entry is held until released.
func (t *Tool) load(ctx context.Context, tenant, path string, version int64) (*entry, *Module, error) {
	sourceErr := func(err error) error {
		if errors.Is(err, ErrNotFound) {
			if version > 0 {
				return fail("module %q has no version %d", path, version)
			}
			return fail("module %q is not registered (noetl plugin register)", path)
		}
		var r retryable
		return &tools.Error{Msg: fmt.Sprintf("wasm: module %q: %v", path, err), Retryable: errors.As(err, &r) && r.Retryable()}
	}
	meta, err := t.cfg.Source(ctx, tenant, path, version, false)
	if err != nil {
		return nil, nil, sourceErr(err)
	}
	key := tenant + "\x00" + path
	if e := t.cache.acquire(meta.Digest, key); e != nil {
		return e, meta, nil
	}
	full, err := t.cfg.Source(ctx, tenant, path, meta.Version, true)
	if err != nil {
		return nil, nil, sourceErr(err)
	}
	sum := sha256.Sum256(full.Bytes)
	if hex.EncodeToString(sum[:]) != full.Digest {
		return nil, nil, fail("module %q version %d: the bytes fetched do not match its digest", path, full.Version)
	}
	compiled, err := t.rt.CompileModule(ctx, full.Bytes)
	if err != nil {
		return nil, nil, fail("module %q version %d does not compile: %v", path, full.Version, err)
	}
	return t.cache.add(full.Digest, key, compiled), full, nil
}

// callState is what the host functions of one call see (through its context).
type callState struct {
	tool   *Tool
	tenant string
	class  Class
	input  map[string]any
	log    *tools.Log

	reply    []byte
	output   []byte
	hasOut   bool
	failMsg  string
	failed   bool
	logBytes int
}

type stateKey struct{}

// call instantiates the module and runs its _start under the limits.
func (t *Tool) call(ctx context.Context, c *tools.Call, compiled wazero.CompiledModule, st *callState, path string, version int64) (any, error) {
	runCtx, cancel := context.WithTimeout(context.WithValue(ctx, stateKey{}, st), t.cfg.Timeout)
	defer cancel()
	stderr := &tail{max: 4 << 10}
	mc := wazero.NewModuleConfig().WithName("").WithArgs(path).
		WithStdout(c.Log.Stdout()).WithStderr(multi{c.Log.Stderr(), stderr}).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().WithRandSource(rand.Reader)
	mod, err := t.rt.InstantiateModule(runCtx, compiled, mc)
	if mod != nil {
		_ = mod.Close(context.WithoutCancel(ctx))
	}
	name := fmt.Sprintf("module %q version %d", path, version)
	if err != nil {
		var exit *sys.ExitError
		switch {
		case ctx.Err() != nil:
			// The command was cancelled or the worker is stopping: the worker's own
			// handling of its context applies.
			return nil, context.Cause(ctx)
		case errors.As(err, &exit) && (exit.ExitCode() == sys.ExitCodeDeadlineExceeded || exit.ExitCode() == sys.ExitCodeContextCanceled),
			errors.Is(runCtx.Err(), context.DeadlineExceeded):
			return nil, fail("%s ran past its time limit of %s and was stopped", name, t.cfg.Timeout)
		case st.failed:
			return nil, &tools.Error{Msg: fmt.Sprintf("wasm: %s failed: %s", name, st.failMsg)}
		case outOfMemory(stderr.String(), err):
			return nil, fail("%s exceeded its memory limit of %d MiB and was stopped", name, int(t.pages)*65536>>20)
		case errors.As(err, &exit):
			return nil, fail("%s exited with code %d%s", name, exit.ExitCode(), stderr.suffix())
		default:
			return nil, fail("%s trapped: %v%s", name, err, stderr.suffix())
		}
	}
	if st.failed {
		return nil, &tools.Error{Msg: fmt.Sprintf("wasm: %s failed: %s", name, st.failMsg)}
	}
	if !st.hasOut {
		return nil, nil
	}
	var v any
	if err := domain.DecodeJSON(st.output, &v); err != nil {
		return nil, fail("%s wrote output that is not JSON: %v", name, err)
	}
	return v, nil
}

// outOfMemory reports whether a module stopped because its memory could not grow: the Go
// runtime says so on stderr; a module of another language traps on its failed growth.
func outOfMemory(stderr string, err error) bool {
	return strings.Contains(stderr, "out of memory") || strings.Contains(err.Error(), "out of memory") && !strings.Contains(err.Error(), "out of bounds")
}

// tail keeps the last max bytes written.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if len(w.buf) > w.max {
		w.buf = w.buf[len(w.buf)-w.max:]
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// suffix is ": <last stderr line>" or "".
func (w *tail) suffix() string {
	s := strings.TrimSpace(w.String())
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	return ": " + strings.TrimSpace(lines[0])
}

type multi [2]interface{ Write([]byte) (int, error) }

func (m multi) Write(p []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// checkImports refuses a module importing anything beyond WASI and the host functions of
// its class.
func checkImports(compiled wazero.CompiledModule, class Class) error {
	for _, f := range compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case wasi_snapshot_preview1.ModuleName:
			continue
		case HostModule:
			c, ok := capabilityOf(name)
			if !ok {
				return fmt.Errorf("imports %s.%s, which the host does not offer", mod, name)
			}
			if !c.grantedTo(class) {
				return fmt.Errorf("imports %s.%s (capability %s), which %s modules are not granted", mod, name, c.Name, class)
			}
		default:
			return fmt.Errorf("imports %s.%s: only %s and %s functions are offered", mod, name, HostModule, wasi_snapshot_preview1.ModuleName)
		}
	}
	return nil
}

// read copies n bytes of the module's memory at ptr.
func read(m api.Module, ptr, n uint32) ([]byte, bool) {
	if n > maxTransfer {
		return nil, false
	}
	b, ok := m.Memory().Read(ptr, n)
	if !ok {
		return nil, false
	}
	return bytes.Clone(b), true
}
