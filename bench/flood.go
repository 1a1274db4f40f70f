package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
)

var (
	floodStarts      = flag.Int("starts", 10000, "flood: starts to send")
	floodConcurrency = flag.Int("concurrency", 200, "flood: starts in flight at once (one client connection each over REST)")
	floodTransport   = flag.String("transport", "rest", "flood: rest (POST /v1/executions) or grpc (StartExecution)")
	floodSettle      = flag.Duration("settle", 2*time.Minute, "flood: how long to wait after the flood before the last reading")
	floodDeadline    = flag.Duration("flood-timeout", 10*time.Minute, "flood: give up on the flood after this long")
)

// floodPlaybook is the playbook every start of the flood names: one noop step.
const floodPlaybook = `apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flood, path: bench/flood}
workflow:
  - step: start
    tool: {kind: noop}
`

// gatewayMem is the gateway process's memory at one point: its resident set from
// /proc/<pid>/status and, from its /metrics, the Go heap in use, the goroutine stacks and
// the goroutines.
type gatewayMem struct {
	RSSMB       float64 `json:"rss_mb"`
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	StackMB     float64 `json:"stack_mb"`
	Goroutines  float64 `json:"goroutines"`
	AtS         float64 `json:"at_s"`
}

// runFloodProcs runs the flood workload: a process mesh (each service its own OS process,
// so the gateway's memory is its own), one noop playbook, then --starts starts sent with
// --concurrency in flight, as fast as the gateway answers (refusals of the per-tenant
// limits included). It reads the gateway's memory before the flood, right after it and
// every 10 s while it settles for --settle, and prints one JSON line. The client keeps its
// connections open through the settling, as a client that does not close them would. All
// on 127.0.0.1; bounded by --starts and --flood-timeout.
func runFloodProcs(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	p, err := startProcMesh(ctx, log)
	if err != nil {
		return err
	}
	defer p.Stop()
	gw := p.proc("gateway")
	conn, err := grpcx.DialSigned(p.GRPCAddr, auth.Bearer(p.AdminKey))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := apiv1.NewCatalogServiceClient(conn).RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: floodPlaybook}); err != nil {
		return err
	}
	t0 := time.Now()
	read := func() gatewayMem {
		m := metricsOf(gw.admin, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines")
		rss, _ := gw.rssMB()
		return gatewayMem{RSSMB: round1(rss), HeapInuseMB: round1(m["go_memstats_heap_inuse_bytes"] / (1 << 20)), StackMB: round1(m["go_memstats_stack_inuse_bytes"] / (1 << 20)),
			Goroutines: m["go_goroutines"], AtS: round1(time.Since(t0).Seconds())}
	}
	before := read()
	cpu := procsCPUMeter(p)
	cpuBefore := cpu.before()

	var send func(ctx context.Context) (int, error)
	var client *http.Client
	switch *floodTransport {
	case "rest":
		// One connection per worker, kept open after the flood (no idle timeout).
		client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *floodConcurrency, MaxConnsPerHost: *floodConcurrency, IdleConnTimeout: 0, DialContext: (&net.Dialer{}).DialContext}}
		body := []byte(`{"path":"bench/flood"}`)
		url := "http://" + p.HTTPAddr + "/v1/executions"
		send = func(ctx context.Context) (int, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return 0, err
			}
			req.Header.Set("Authorization", "Bearer "+p.AdminKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			return resp.StatusCode, nil
		}
	case "grpc":
		exe := apiv1.NewExecutionServiceClient(conn)
		send = func(ctx context.Context) (int, error) {
			_, err := exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: "bench/flood"})
			switch status.Code(err) {
			case codes.OK:
				return http.StatusOK, nil
			case codes.ResourceExhausted:
				return http.StatusTooManyRequests, nil
			}
			return 0, err
		}
	default:
		return fmt.Errorf("flood: unknown --transport %q (rest, grpc)", *floodTransport)
	}

	fctx, cancel := context.WithTimeout(ctx, *floodDeadline)
	defer cancel()
	var next, ok, refused, other atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	peak := before
	var peakMu sync.Mutex
	sampling, stopSampling := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sampling.Done():
				return
			case <-t.C:
			}
			m := read()
			peakMu.Lock()
			if m.RSSMB > peak.RSSMB {
				peak = m
			}
			peakMu.Unlock()
		}
	}()
	for range *floodConcurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(*floodStarts) && fctx.Err() == nil {
				code, err := send(fctx)
				switch {
				case err != nil:
					other.Add(1)
					errOnce.Do(func() { firstErr = err })
				case code == http.StatusOK:
					ok.Add(1)
				case code == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
					errOnce.Do(func() { firstErr = fmt.Errorf("HTTP %d", code) })
				}
			}
		})
	}
	wg.Wait()
	stopSampling()
	wall := time.Since(start)
	if err := fctx.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("flood: not done within --flood-timeout %s (%d sent)", *floodDeadline, ok.Load()+refused.Load()+other.Load())
	}
	after := read()
	settling := []gatewayMem{after}
	deadline := time.Now().Add(*floodSettle)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(10*time.Second, time.Until(deadline))):
		}
		settling = append(settling, read())
	}
	cpuAfter := cpu.after()
	settled := settling[len(settling)-1]
	out := map[string]any{
		"workload": "flood", "transport": *floodTransport, "starts": *floodStarts, "concurrency": *floodConcurrency,
		"started": ok.Load(), "refused_429": refused.Load(), "failed": other.Load(),
		"wall_ms": float64(wall.Microseconds()) / 1000, "settle_s": floodSettle.Seconds(),
		"gateway_before": before, "gateway_peak": peak, "gateway_after": after, "gateway_settled": settled, "gateway_settling": settling,
		"memory_scope": "the gateway process alone (each service runs as its own process): rss_mb is its VmRSS, heap_inuse_mb, stack_mb and goroutines come from its /metrics; after is right after the last answer, settled --settle later with the client's connections still open",
	}
	if firstErr != nil {
		out["first_error"] = firstErr.Error()
	}
	noStepFields(out, "flood sends starts without waiting for their executions: it measures the gateway's memory, and no step's latency is read; cpu_s_per_1k_steps is per 1,000 started executions (one noop step each) over the flood and the settling, whether or not they have ended by then")
	cpuFields(out, &cpu, cpuBefore, cpuAfter, int(ok.Load()))
	if client != nil {
		client.CloseIdleConnections()
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// metricsOf reads the named unlabelled metrics of a service's /metrics (missing ones are 0).
func metricsOf(admin string, names ...string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return out
	}
	defer func() { _ = resp.Body.Close() }()
	s := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		name, val, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err == nil {
					out[n] = v
				}
			}
		}
	}
	return out
}
