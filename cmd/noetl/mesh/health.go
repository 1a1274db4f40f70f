package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Readiness is the mesh's readiness: each service's own /readyz (which checks what that
// service depends on: Postgres, NATS, the services it calls), by service name.
type Readiness struct {
	// Ready is true when every service is ready.
	Ready bool `json:"ready"`
	// Services holds "ok" or the reason a service is not ready.
	Services map[string]string `json:"services"`
}

// Ready asks every service's admin /readyz at once and reports them all.
func (m *Mesh) Ready(ctx context.Context) Readiness {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r := Readiness{Ready: true, Services: make(map[string]string, len(m.AdminAddrs))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, addr := range m.AdminAddrs {
		wg.Go(func() {
			why := probe(ctx, "http://"+addr+"/readyz")
			mu.Lock()
			defer mu.Unlock()
			r.Services[name] = why
			if why != "ok" {
				r.Ready = false
			}
		})
	}
	wg.Wait()
	return r
}

// probe GETs url and returns "ok" for a 200, else what went wrong.
func probe(ctx context.Context, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode == http.StatusOK {
		return "ok"
	}
	// A service's /readyz lists its checks one a line; keep the failing ones.
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		if !strings.HasSuffix(line, ": ok") && line != "" {
			bad = append(bad, line)
		}
	}
	sort.Strings(bad)
	return fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.Join(bad, "; "))
}

// readyz serves the mesh's readiness as JSON: 200 when every service is ready, else 503.
func (m *Mesh) readyz(w http.ResponseWriter, r *http.Request) {
	rd := m.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}

// livez answers 200 while the process serves.
func livez(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}
