package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/internal/platform/natsx"
)

var (
	natsSyncDuration   = flag.Duration("natssync-duration", 5*time.Second, "natssync: how long each measurement publishes")
	natsSyncPublishers = flag.Int("natssync-publishers", 16, "natssync: concurrent publishers of the concurrent measurement")
	natsSyncBytes      = flag.Int("natssync-bytes", 512, "natssync: message size (a typical NoETL event)")
	natsSyncPolicies   = flag.String("natssync-policies", "default,1s,always", "natssync: comma-separated sync_interval values to measure (default: the server's own, 2m)")
)

// runNATSSync measures what JetStream's fsync policy costs on this machine: acknowledged
// publishes per second to a file-backed stream, on one server (R1) and on a three-server
// cluster in this process (R3, routes on loopback), for each sync_interval of
// natssync-policies (by default the server's own, 2m; 1s; always). Two measurements each: one publisher waiting for every ack (the latency
// of one publish), and natssync-publishers publishers each publishing a worker's outcome
// (three messages, PublishAll) at a time. One JSON line per measurement.
func runNATSSync(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "noetl-natssync-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	payload := make([]byte, *natsSyncBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	for _, topo := range []struct {
		name     string
		replicas int
	}{{"single", 1}, {"cluster3", 3}} {
		for _, policy := range strings.Split(*natsSyncPolicies, ",") {
			sync, label := policy, policy
			if policy == "default" {
				sync, label = "", "2m (default)"
			}
			urls, stop, err := startNATSForSync(filepath.Join(dir, topo.name+"-"+policy), topo.replicas, sync)
			if err != nil {
				return err
			}
			err = func() error {
				defer stop()
				nc, err := nats.Connect(urls, nats.MaxReconnects(-1))
				if err != nil {
					return err
				}
				defer nc.Close()
				js, err := jetstream.New(nc)
				if err != nil {
					return err
				}
				if err := createSyncStream(ctx, js, topo.replicas); err != nil {
					return err
				}
				for _, phase := range []string{"sequential", "concurrent"} {
					r, err := measurePublishes(ctx, js, phase, payload)
					if err != nil {
						return fmt.Errorf("%s %s %s: %w", topo.name, label, phase, err)
					}
					r["topology"], r["replicas"], r["sync_interval"] = topo.name, topo.replicas, label
					if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
						return err
					}
				}
				return nil
			}()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// createSyncStream creates the measured stream, retrying while a cluster elects its
// JetStream meta leader.
func createSyncStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: "SYNC", Subjects: []string{"sync.>"}, Storage: jetstream.FileStorage, Replicas: replicas})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create stream: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // a meta leader is being elected
		}
	}
}

// measurePublishes publishes for natssync-duration and returns the rate and the latency
// percentiles of one acknowledged publish (sequential) or of one three-message outcome
// (concurrent).
func measurePublishes(ctx context.Context, js jetstream.JetStream, phase string, payload []byte) (map[string]any, error) {
	publishers := 1
	if phase == "concurrent" {
		publishers = *natsSyncPublishers
	}
	end := time.Now().Add(*natsSyncDuration)
	var mu sync.Mutex
	var lat []time.Duration
	msgs := 0
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	start := time.Now()
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			n := 0
			for i := 0; time.Now().Before(end); i++ {
				t0 := time.Now()
				var err error
				if phase == "sequential" {
					_, err = js.Publish(ctx, "sync.x", payload)
					n++
				} else {
					batch := make([]natsx.Message, 3)
					for k := range batch {
						batch[k] = natsx.Message{Subject: fmt.Sprintf("sync.p%d", p), MsgID: fmt.Sprintf("%d-%d-%d", p, i, k), Data: payload}
					}
					err = natsx.PublishAll(ctx, js, batch)
					n += len(batch)
				}
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat, msgs = append(lat, mine...), msgs+n
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000
	}
	return map[string]any{
		"workload": "natssync", "phase": phase, "publishers": publishers, "message_bytes": len(payload),
		"msgs_per_s": float64(msgs) / wall.Seconds(), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
	}, nil
}

// startNATSForSync starts one server (natsembed) or a three-server cluster on loopback with
// the given sync policy and returns the client URLs and a function that stops them.
func startNATSForSync(dir string, n int, sync string) (string, func(), error) {
	if n == 1 {
		s, err := natsembed.Start(natsembed.Options{StoreDir: dir, Sync: sync})
		if err != nil {
			return "", nil, err
		}
		return s.ClientURL(), s.Shutdown, nil
	}
	always, interval, err := natsembed.ParseSync(sync)
	if err != nil {
		return "", nil, err
	}
	routePorts := make([]int, n)
	for i := range routePorts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", nil, err
		}
		routePorts[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	var servers []*server.Server
	stop := func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	var urls []string
	for i := range n {
		var routes []string
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
			}
		}
		opts := &server.Options{
			ServerName: fmt.Sprintf("sync-%d", i), Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true,
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprint(i)), SyncAlways: always, SyncInterval: interval,
			Cluster: server.ClusterOpts{Name: "natssync", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(opts)
		if err != nil {
			stop()
			return "", nil, err
		}
		s.Start()
		servers = append(servers, s)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			stop()
			return "", nil, fmt.Errorf("%s not ready for connections within 10s", s.Name())
		}
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ","), stop, nil
}
