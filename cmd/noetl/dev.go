//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/noetl/noetl/cmd/noetl/mesh"
	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/internal/platform/natsembed"
	"github.com/noetl/noetl/services/gateway"
	"github.com/noetl/noetl/services/worker"
)

// devCmd is `noetl dev`: the whole mesh in this process, until SIGINT or SIGTERM.
func devCmd() *cobra.Command {
	var httpAddr, grpcAddr, stateDir, run, trace, egress string
	var verbose, insecure, shell bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole mesh in one process: embedded NATS JetStream, a private Postgres, and the six services",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := worker.CheckHTTPEgress(egress); err != nil {
				return fmt.Errorf("--http-egress %q: %w", egress, err)
			}
			if stateDir == "" {
				stateDir = defaultStateDir()
			}
			if err := os.MkdirAll(stateDir, 0o755); err != nil {
				return err
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hugePages, err := devHugePages()
			if err != nil {
				return err
			}
			cfg, err := devEnv(mesh.Config{StateDir: stateDir, Insecure: insecure, HTTPAddr: httpAddr, GRPCAddr: grpcAddr, Trace: mesh.TraceConfig(trace), HTTPEgress: egress, Shell: shell, Log: log})
			if err != nil {
				return err
			}
			// The OpenAPI document's info.version is this CLI's release.
			cfg.Gateway = func(g *gateway.Config) { g.Version = version }
			// Beside its own Postgres the mesh leaves that server a core (mesh/procs.go).
			procs, leftCore := runtime.GOMAXPROCS(0), false
			if cfg.PostgresURL == "" {
				procs, leftCore = mesh.LeaveCoreToPostgres()
			}
			// The mesh's heap on huge pages and written ahead, unless NOETL_DEV_HUGE_PAGES=false
			// (mesh/hugepages.go).
			var heap mesh.Heap
			if hugePages {
				h, err := mesh.HugePageHeap()
				switch {
				case err != nil:
					log.Warn("huge pages for the heap", slog.String("error", err.Error()))
				case h.Reason != "":
					log.Info("huge pages for the heap: none", slog.String("reason", h.Reason))
				}
				heap = h
			}
			m, err := mesh.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer m.Stop()
			fmt.Printf("NoETL dev mesh ready\n  REST:  http://%s  (OpenAPI at /openapi.json; the mesh's health at /livez and /readyz)\n  gRPC:  %s\n  state: %s\n", m.HTTPAddr, m.GRPCAddr, stateDir)
			if m.PostgresDir != "" {
				// The private cluster's URL, for psql and for credentials of playbooks that
				// use the dev mesh's own database (examples/http_postgres.yaml).
				urlFile := filepath.Join(stateDir, mesh.PostgresURLFile)
				if err := os.WriteFile(urlFile, []byte(m.PostgresURL+"\n"), 0o600); err != nil {
					return err
				}
				fmt.Printf("  postgres: %s  (also in %s)\n", m.PostgresURL, urlFile)
				fmt.Printf("            fast mode (fsync off): an OS crash or power loss can lose the last commits; a crash of Postgres or of noetl dev loses nothing\n")
				if m.PostgresDir != filepath.Join(stateDir, "postgres") {
					fmt.Printf("            cluster in %s (the postgres user runs the server and cannot reach %s)\n", m.PostgresDir, stateDir)
				}
			}
			fmt.Printf("  nats:  %s  (JetStream store in %s)\n", m.NATSURL, filepath.Join(stateDir, "nats"))
			if always, _, _ := natsembed.ParseSync(cfg.NATSSync); always {
				fmt.Printf("         fsync on every write (NOETL_NATS_SYNC_INTERVAL=always): an OS crash or power loss loses no acknowledged message\n")
			} else {
				fmt.Printf("         fsync every %s (NOETL_NATS_SYNC_INTERVAL): an OS crash or power loss can lose messages acknowledged since the last one; a crash of noetl dev loses nothing\n", natsSyncPeriod(cfg.NATSSync))
			}
			if leftCore {
				fmt.Printf("  go:    the mesh schedules on %d processors instead of %d, one core left to its Postgres (GOMAXPROCS overrides)\n", procs, procs+1)
			}
			if heap.HugePages {
				gc := "collected as GOGC says"
				if heap.GCPercent > 0 {
					gc = fmt.Sprintf("collected at %d%% growth (GOGC sets it)", heap.GCPercent)
				}
				if heap.MemoryLimit > 0 {
					gc += fmt.Sprintf(", soft limit %d MiB (GOMEMLIMIT sets it)", heap.MemoryLimit>>20)
				}
				fmt.Printf("  heap:  on transparent huge pages, %d MiB written ahead, %s; NOETL_DEV_HUGE_PAGES=false turns this off\n", heap.Ahead>>20, gc)
			}
			fmt.Printf("  admin (/livez, /readyz, /metrics):\n")
			for _, name := range slices.Sorted(maps.Keys(m.AdminAddrs)) {
				fmt.Printf("    %-14s http://%s\n", name, m.AdminAddrs[name])
			}
			keyFile := filepath.Join(stateDir, mesh.AdminKeyFile)
			if insecure {
				fmt.Printf("  auth:  OFF (--insecure): every caller is an admin of tenant default\n")
			} else {
				if m.AdminKeyCreated {
					fmt.Printf("  auth:  created an admin API key of tenant default in %s (mode 0600)\n", keyFile)
				} else {
					fmt.Printf("  auth:  admin API key of tenant default in %s\n", keyFile)
				}
				fmt.Printf("         export NOETL_API_KEY=$(cat %s)\n         curl -H \"Authorization: Bearer $NOETL_API_KEY\" http://%s/v1/playbooks\n", keyFile, m.HTTPAddr)
				fmt.Printf("         noetl apikey create --role operator   # more keys (the CLI reads this key itself when --state-dir is the default)\n")
			}
			fmt.Printf("Press Ctrl-C to stop.\n")
			if run != "" {
				c, err := dialAddr(m.GRPCAddr, m.AdminKey)
				if err != nil {
					return err
				}
				res, err := runFile(ctx, c, run, nil, nil, true, nil)
				_ = c.conn.Close()
				if err != nil {
					return err
				}
				emit(res)
			}
			select {
			case <-ctx.Done():
			case <-m.Done():
				return m.Err()
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:8080", "gateway REST address")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "127.0.0.1:50051", "gateway gRPC address")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state directory: NATS store, keys and (unless the postgres user cannot reach it) the Postgres cluster (default: <user cache dir>/noetl/dev)")
	cmd.Flags().StringVar(&run, "run", "", "run this playbook file once the mesh is up and print its result")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "log at info level")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "turn the gateway's authentication off (every caller is an admin of tenant default)")
	cmd.Flags().StringVar(&egress, "http-egress", worker.HTTPEgressLoopback, "addresses playbooks' http steps may reach: loopback (public and this machine), private (also private ranges) or public; never link-local or cloud metadata")
	cmd.Flags().BoolVar(&shell, "shell", false, "let the worker run kind: shell steps (arbitrary commands on this machine; NOETL_WORKER_SHELL)")
	cmd.Flags().StringVar(&trace, "trace", "", "trace every service: \"stdout\", or an OTLP/gRPC collector (host:port, https://host:port); default off")
	return cmd
}

// natsSyncPeriod is the fsync period a Sync value that is not "always" means.
func natsSyncPeriod(sync string) time.Duration {
	if _, d, _ := natsembed.ParseSync(sync); d > 0 {
		return d
	}
	return natsembed.SyncDefault
}

// devHugePages reads NOETL_DEV_HUGE_PAGES: whether noetl dev backs its heap with huge
// pages and writes it ahead (mesh.HugePageHeap); on by default.
func devHugePages() (bool, error) {
	var env config.Env
	on := env.Bool("NOETL_DEV_HUGE_PAGES", true)
	return on, env.Err()
}

// devEnv fills cfg from the NOETL_* variables `noetl dev` honours, strictly: a malformed
// or out-of-range value is an error naming the variable and the value. Unset numbers keep
// the mesh's defaults.
func devEnv(cfg mesh.Config) (mesh.Config, error) {
	var env config.Env
	cfg.PostgresURL = env.Secret("NOETL_PG_URL", "")
	cfg.EncryptionKey = env.Secret("NOETL_ENCRYPTION_KEY", "")
	cfg.Partitions = env.Int("NOETL_PARTITIONS", 0, config.Positive)
	cfg.WorkerConcurrency = env.Int("NOETL_WORKER_CONCURRENCY", 0, config.Positive)
	cfg.ReconcileEvery = env.Duration("NOETL_RECONCILE_EVERY", 0, config.Positive)
	cfg.StaleAfter = env.Duration("NOETL_STALE_AFTER", 0, config.Positive)
	cfg.MaxStepEntries = env.Int("NOETL_MAX_STEP_ENTRIES", 0, config.Positive)
	cfg.MaxEvents = env.Int("NOETL_MAX_EVENTS", 0, config.Positive)
	cfg.TenantLimits = env.String("NOETL_TENANT_LIMITS", "") // the orchestrator checks it at start
	cfg.SystemPlaybooks = env.Bool("NOETL_SYSTEM_PLAYBOOKS", true)
	cfg.Retention = env.Duration("NOETL_RETENTION", 0, config.Positive)
	cfg.TenantRetention = env.String("NOETL_TENANT_RETENTION", "") // the orchestrator checks it at start
	cfg.NATSSync = env.String("NOETL_NATS_SYNC_INTERVAL", "", natsembed.CheckSync)
	return cfg, env.Err()
}
