// Package console is the gateway's web console: a single-page application of hand-written
// ES modules and CSS, embedded in the binary and served under /ui/ with a strict
// Content-Security-Policy, plus the one read-only route the public API has no equivalent
// of, the step graph of a playbook laid out for drawing (GET /ui/api/graph).
//
// The console is a client of the public REST API on the same origin: it sends the API key
// or JWT the user entered (kept in sessionStorage) as `Authorization: Bearer` on every
// call, so it can do exactly what the key may. Its graph route reads the playbook through
// the gateway's own gRPC server with the request's credentials, so it is authenticated,
// authorized and limited as GET /v1/playbooks/{path} is.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/playbook"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// GraphRoute is the console's graph route: ?path=P&version=N (zero or absent: the latest).
const GraphRoute = Prefix + "api/graph"

// CSP is the Content-Security-Policy of every console response: scripts, styles and
// connections from the gateway's origin only, no inline script or style, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed ui
var assets embed.FS

// Config is what the console needs from the gateway.
type Config struct {
	// Catalog reads playbooks. The gateway passes a client of its own gRPC server (the
	// loopback connection) with the request's credentials in the outgoing metadata.
	Catalog apiv1.CatalogServiceClient
	// Error writes err as the REST API writes its errors (status code and JSON body).
	Error func(w http.ResponseWriter, r *http.Request, err error)
}

// Console serves the console.
type Console struct {
	cfg    Config
	files  map[string]asset
	graphs graphCache
}

// graphCacheSize is how many laid-out graphs are kept, by the digest of their playbook's
// content (a version's content never changes, and laying out a large one takes a while).
const graphCacheSize = 128

// graphCache keeps the graphs laid out last.
type graphCache struct {
	mu    sync.Mutex
	byKey map[[32]byte]Graph
	order [][32]byte
}

func (c *graphCache) get(k [32]byte) (Graph, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.byKey[k]
	return g, ok
}

func (c *graphCache) put(k [32]byte, g Graph) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[[32]byte]Graph{}
	}
	if _, ok := c.byKey[k]; ok {
		return
	}
	if len(c.order) == graphCacheSize {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
	c.byKey[k] = g
	c.order = append(c.order, k)
}

// asset is one embedded file with its entity tag.
type asset struct {
	data []byte
	etag string
}

// New returns the console's handler of every path under Prefix.
func New(cfg Config) *Console {
	c := &Console{cfg: cfg, files: map[string]asset{}}
	ui, err := fs.Sub(assets, "ui")
	if err != nil {
		panic(err) // the embedded tree always has ui/
	}
	_ = fs.WalkDir(ui, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(ui, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		c.files[p] = asset{data: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return c
}

// securityHeaders are set on every console response.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == GraphRoute {
		c.graph(w, r)
		return
	}
	// Only the embedded files are served, by their exact names.
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if name == "" {
		name = "index.html"
	}
	a, ok := c.files[name]
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", a.etag)
	// Revalidated on every load (a new gateway serves new assets at once); the entity tag
	// makes an unchanged file a 304.
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.data))
}

// graph answers GET /ui/api/graph?path=P&version=N with the playbook's Graph as JSON.
func (c *Console) graph(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		c.cfg.Error(w, r, status.Error(codes.InvalidArgument, "path: required"))
		return
	}
	var version int64
	if v := q.Get("version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			c.cfg.Error(w, r, status.Error(codes.InvalidArgument, "version: must be a non-negative integer"))
			return
		}
		version = n
	}
	resp, err := c.cfg.Catalog.GetPlaybook(r.Context(), &apiv1.GetPlaybookRequest{Path: p, Version: version})
	if err != nil {
		c.cfg.Error(w, r, err)
		return
	}
	pb := resp.GetPlaybook()
	key := sha256.Sum256([]byte(pb.GetContent()))
	g, ok := c.graphs.get(key)
	if !ok {
		parsed, err := playbook.Parse([]byte(pb.GetContent()))
		if err != nil {
			c.cfg.Error(w, r, status.Error(codes.FailedPrecondition, fmt.Sprintf("playbook %s version %d: %v", pb.GetPath(), pb.GetVersion(), err)))
			return
		}
		g = buildGraph(pb.GetPath(), pb.GetVersion(), parsed)
		c.graphs.put(key, g)
	}
	// The same content may be several versions, or paths of several tenants.
	g.Path, g.Version = pb.GetPath(), pb.GetVersion()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(g)
}
