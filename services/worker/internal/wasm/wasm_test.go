package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/testkit"
	"github.com/noetl/noetl/services/worker/internal/tools"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// catalog is an in-memory plug-in catalog per tenant, the Source of these tests (the
// mesh tests read the orchestrator's).
type catalog struct {
	mu   sync.Mutex
	mods map[string][]*Module // tenant\x00path -> versions
	// fetches counts the reads with bytes (compilations).
	fetches int
}

func newCatalog() *catalog { return &catalog{mods: map[string][]*Module{}} }

func (c *catalog) register(tenant, path string, mod []byte) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := sha256.Sum256(mod)
	k := tenant + "\x00" + path
	m := &Module{Path: path, Version: int64(len(c.mods[k]) + 1), Digest: hex.EncodeToString(sum[:]), Bytes: mod}
	c.mods[k] = append(c.mods[k], m)
	return m.Version
}

func (c *catalog) source(_ context.Context, tenant, path string, version int64, withBytes bool) (*Module, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := c.mods[tenant+"\x00"+path]
	if len(vs) == 0 || version > int64(len(vs)) {
		return nil, ErrNotFound
	}
	m := vs[len(vs)-1]
	if version > 0 {
		m = vs[version-1]
	}
	out := *m
	if withBytes {
		c.fetches++
	} else {
		out.Bytes = nil
	}
	return &out, nil
}

type tenantKey struct{}

func withTenant(tenant string) context.Context {
	return context.WithValue(context.Background(), tenantKey{}, tenant)
}

func newTool(t *testing.T, cat *catalog, mod func(*Config)) *Tool {
	t.Helper()
	cfg := Config{Pool: "shared", WorkerID: "w1", Source: cat.source, Timeout: time.Minute, Interpreter: true,
		Tenant: func(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }}
	if mod != nil {
		mod(&cfg)
	}
	tool := New(cfg)
	t.Cleanup(func() { _ = tool.Close(context.Background()) })
	return tool
}

func run(t *testing.T, tool *Tool, tenant string, cfg, input map[string]any) (map[string]any, *tools.Log, error) {
	t.Helper()
	log := tools.NewLog(64 << 10)
	res, err := tool.Run(withTenant(tenant), &tools.Call{Kind: Kind, Config: cfg, Input: input, Step: "s", Log: log})
	if err != nil {
		return nil, log, err
	}
	m, ok := res.(map[string]any)
	require.True(t, ok, "result %T %v", res, res)
	return m, log, nil
}

func stdout(l *tools.Log) string {
	for _, s := range l.Streams() {
		if s.Name == tools.StreamStdout {
			return string(s.Tail)
		}
	}
	return ""
}

// The sample plug-in, built from the repository with the Go toolchain, greets its input,
// logs to the step's log, and runs in a fresh instance each call (its call counter is
// always 1: instances share no memory).
func TestSamplePlugin(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/greeter", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	// The compiler, the worker's default engine (the other tests interpret, which loads a
	// module much faster under the race detector).
	tool := newTool(t, cat, func(c *Config) { c.Interpreter = false })
	for range 2 {
		out, log, err := run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "Ada", "greeting": "Hi"})
		require.NoError(t, err)
		require.Equal(t, "Hi, Ada!", out["message"])
		require.Equal(t, "v1", out["version"])
		require.Equal(t, json.Number("1"), out["calls"], "a call sees a fresh instance")
		require.Contains(t, stdout(log), "[info] greeting Ada")
	}
	require.Equal(t, 1, cat.fetches, "the module is fetched and compiled once")
	// The plug-in's own failure fails the step with its message.
	_, _, err := run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{})
	require.ErrorContains(t, err, `module "acme/greeter" version 1 failed: input.name is required`)
}

// A new catalog version is run by the next call, without a new tool (hot reload), and the
// compiled module of the version it replaced is evicted; a pinned version still runs.
func TestReloadNewVersion(t *testing.T) {
	cat := newCatalog()
	v1 := testkit.BuildWasm(t, testkit.SamplePlugin, "")
	v2 := testkit.BuildWasm(t, testkit.SamplePlugin, "-X main.version=v2")
	require.NotEqual(t, v1, v2)
	cat.register("acme", "acme/greeter", v1)
	tool := newTool(t, cat, nil)
	step := map[string]any{"module": "acme/greeter"}
	out, _, err := run(t, tool, "acme", step, map[string]any{"name": "Ada"})
	require.NoError(t, err)
	require.Equal(t, "v1", out["version"])
	d1 := tool.Cached()
	require.Len(t, d1, 1)

	cat.register("acme", "acme/greeter", v2)
	out, _, err = run(t, tool, "acme", step, map[string]any{"name": "Ada"})
	require.NoError(t, err)
	require.Equal(t, "v2", out["version"], "the next call runs the new version")
	d2 := tool.Cached()
	require.Len(t, d2, 1, "the replaced version's compiled module is evicted")
	require.NotEqual(t, d1, d2)

	out, _, err = run(t, tool, "acme", map[string]any{"module": "acme/greeter", "version": 1}, map[string]any{"name": "Ada"})
	require.NoError(t, err)
	require.Equal(t, "v1", out["version"], "a pinned version runs")
}

// The cache holds at most CacheModules compiled modules.
func TestCacheIsBounded(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/a", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	cat.register("acme", "acme/b", testkit.BuildWasm(t, testkit.SamplePlugin, "-X main.version=v2"))
	tool := newTool(t, cat, func(c *Config) { c.CacheModules = 1 })
	for _, p := range []string{"acme/a", "acme/b", "acme/a"} {
		_, _, err := run(t, tool, "acme", map[string]any{"module": p}, map[string]any{"name": "x"})
		require.NoError(t, err)
		require.Len(t, tool.Cached(), 1)
	}
	require.Equal(t, 3, cat.fetches)
}

// A module that never ends is stopped at the time limit and the step fails saying so.
func TestTimeLimitStopsARunawayModule(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/spin", testkit.BuildWasm(t, testkit.SpinPlugin, ""))
	tool := newTool(t, cat, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	_, _, err := run(t, tool, "acme", map[string]any{"module": "acme/spin"}, nil)
	var te *tools.Error
	require.ErrorAs(t, err, &te)
	require.False(t, te.Retryable)
	require.ErrorContains(t, err, `module "acme/spin" version 1 ran past its time limit of 300ms and was stopped`)
}

// A module that allocates without end is stopped at the memory limit and the step fails
// saying so; the next call of another module runs as usual.
func TestMemoryLimitStopsAHog(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/hog", testkit.BuildWasm(t, testkit.HogPlugin, ""))
	cat.register("acme", "acme/greeter", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	tool := newTool(t, cat, func(c *Config) { c.MemoryLimit = 48 << 20 })
	mem, _ := tool.Limits()
	require.Equal(t, 48<<20, mem)
	_, _, err := run(t, tool, "acme", map[string]any{"module": "acme/hog"}, nil)
	require.ErrorContains(t, err, `module "acme/hog" version 1 exceeded its memory limit of 48 MiB and was stopped`)
	out, _, err := run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "Ada"})
	require.NoError(t, err)
	require.Equal(t, "Hello, Ada!", out["message"])
}

// System modules run only on the system pool, tenant modules everywhere else; a tenant
// module importing a system capability is refused before it runs.
func TestClassesAndPools(t *testing.T) {
	cat := newCatalog()
	sample := testkit.BuildWasm(t, testkit.SamplePlugin, "")
	sysinfo := testkit.BuildWasm(t, testkit.SysinfoPlugin, "")
	cat.register("acme", "acme/greeter", sample)
	cat.register("acme", "acme/info", sysinfo)
	cat.register("acme", "system/info", sysinfo)
	shared := newTool(t, cat, nil)
	system := newTool(t, cat, func(c *Config) { c.Pool = "system" })

	_, _, err := run(t, shared, "acme", map[string]any{"module": "system/info"}, nil)
	require.ErrorContains(t, err, `module "system/info" is a system/ plug-in: it runs only on the system pool, not "shared"`)
	_, _, err = run(t, system, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "x"})
	require.ErrorContains(t, err, `module "acme/greeter" is a tenant plug-in: the system pool runs only system/ plug-ins`)
	_, _, err = run(t, shared, "acme", map[string]any{"module": "acme/info"}, nil)
	require.ErrorContains(t, err, "imports noetl.worker_info (capability worker), which tenant modules are not granted")

	out, _, err := run(t, system, "acme", map[string]any{"module": "system/info"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"pool": "system", "worker": "w1", "tenant": "acme"}, out)
}

// A step naming a module the tenant has not registered fails naming it; another tenant's
// module of that path is not reachable.
func TestModulesArePerTenant(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/greeter", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	tool := newTool(t, cat, nil)
	_, _, err := run(t, tool, "globex", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "x"})
	require.ErrorContains(t, err, `module "acme/greeter" is not registered`)
	_, _, err = run(t, tool, "acme", map[string]any{"module": "acme/greeter", "version": 7}, map[string]any{"name": "x"})
	require.ErrorContains(t, err, `module "acme/greeter" has no version 7`)
	_, _, err = run(t, tool, "acme", map[string]any{}, nil)
	require.ErrorContains(t, err, "module is required")
	_, _, err = run(t, tool, "acme", map[string]any{"module": "acme/greeter", "version": "x"}, nil)
	require.ErrorContains(t, err, `version: "x" is not a whole number`)
}

// kv reads and writes the tenant's own bucket: one tenant's counter is not another's,
// whatever the module.
func TestKVIsPerTenant(t *testing.T) {
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cat := newCatalog()
	mod := testkit.BuildWasm(t, testkit.SamplePlugin, "")
	cat.register("acme", "acme/greeter", mod)
	cat.register("globex", "globex/greeter", mod)
	tool := newTool(t, cat, func(c *Config) { c.JS = js })
	count := func(tenant, path string) string {
		out, _, err := run(t, tool, tenant, map[string]any{"module": path}, map[string]any{"name": "x", "counter": "visits"})
		require.NoError(t, err)
		return fmt.Sprint(out["count"])
	}
	require.Equal(t, "1", count("acme", "acme/greeter"))
	require.Equal(t, "2", count("acme", "acme/greeter"))
	require.Equal(t, "1", count("globex", "globex/greeter"), "globex's bucket is its own")
	require.Equal(t, "3", count("acme", "acme/greeter"))
	kv, err := js.KeyValue(context.Background(), BucketName("globex"))
	require.NoError(t, err)
	e, err := kv.Get(context.Background(), "visits")
	require.NoError(t, err)
	require.Equal(t, "1", string(e.Value()))
	require.Equal(t, "NOETL_PLUGIN_KV_H", BucketName("a.b")[:17])
	// A bad key fails the step naming it.
	_, _, err = run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "x", "counter": "no spaces"})
	require.ErrorContains(t, err, `kv: key "no spaces" must be`)
}

// http goes through the worker's http tool and its egress policy: loopback is refused
// under the public policy and reached under the loopback one.
func TestHTTPThroughEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	cat := newCatalog()
	cat.register("acme", "acme/greeter", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	in := map[string]any{"name": "x", "fetch": srv.URL}
	public := newTool(t, cat, func(c *Config) { c.HTTP = &tools.HTTP{Egress: tools.EgressPublic} })
	_, _, err := run(t, public, "acme", map[string]any{"module": "acme/greeter"}, in)
	require.Error(t, err)
	require.Contains(t, err.Error(), "loopback")
	loop := newTool(t, cat, func(c *Config) { c.HTTP = &tools.HTTP{Egress: tools.EgressLoopback} })
	out, _, err := run(t, loop, "acme", map[string]any{"module": "acme/greeter"}, in)
	require.NoError(t, err)
	fetched, _ := out["fetched"].(map[string]any)
	require.Equal(t, "200", fmt.Sprint(fetched["status"]))
	require.Equal(t, map[string]any{"ok": true}, fetched["body"])
	// Without an http tool the capability is off.
	none := newTool(t, cat, nil)
	_, _, err = run(t, none, "acme", map[string]any{"module": "acme/greeter"}, in)
	require.ErrorContains(t, err, "this worker offers no http")
}

// result reads a stored result by reference, for the command's tenant.
func TestResultByReference(t *testing.T) {
	cat := newCatalog()
	cat.register("acme", "acme/greeter", testkit.BuildWasm(t, testkit.SamplePlugin, ""))
	var asked []string
	tool := newTool(t, cat, func(c *Config) {
		c.LoadResult = func(_ context.Context, tenant, ref string) ([]byte, error) {
			asked = append(asked, tenant+" "+ref)
			if ref != "noetl://r/1" {
				return nil, errors.New("not found")
			}
			return json.Marshal(map[string]any{"rows": 3})
		}
	})
	out, _, err := run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "x", "ref": "noetl://r/1"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"rows": json.Number("3")}, out["ref"])
	_, _, err = run(t, tool, "acme", map[string]any{"module": "acme/greeter"}, map[string]any{"name": "x", "ref": "noetl://r/2"})
	require.ErrorContains(t, err, "result noetl://r/2: not found")
	require.Equal(t, []string{"acme noetl://r/1", "acme noetl://r/2"}, asked)
}

// The capability table names every host function exactly once, and worker_info only for
// system modules.
func TestCapabilityTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Capabilities {
		for _, f := range c.Functions {
			require.False(t, seen[f], f)
			seen[f] = true
		}
	}
	for _, f := range []string{"log", "input", "reply", "output", "fail", "http", "kv_get", "kv_put", "result", "worker_info"} {
		require.True(t, seen[f], f)
	}
	c, _ := capabilityOf("worker_info")
	require.False(t, c.grantedTo(ClassTenant))
	require.True(t, c.grantedTo(ClassSystem))
	require.Equal(t, ClassSystem, ClassOf("system/x"))
	require.Equal(t, ClassTenant, ClassOf("systemx/y"))
	require.True(t, strings.HasPrefix(BucketName("acme"), "NOETL_PLUGIN_KV_"))
}
