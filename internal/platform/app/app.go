// Package app is the lifecycle shared by every NoETL service: an admin HTTP server with
// /livez, /readyz and /metrics, a gRPC server with health and reflection, and an ordered,
// graceful shutdown.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/natsx"
)

// Check is a readiness check of one real dependency.
type Check func(ctx context.Context) error

// Server is one service's network surface: gRPC plus admin HTTP.
type Server struct {
	Name     string
	Log      *slog.Logger
	GRPC     *grpc.Server
	Health   *health.Server
	Registry *prometheus.Registry

	grpcLis  net.Listener
	adminLis net.Listener
	admin    *http.Server

	mu     sync.Mutex
	checks map[string]Check
	errs   *grpcx.Errors
}

// MapErrors adds the service's sentinel errors to the one interceptor that maps handler
// errors to gRPC codes (grpcx.Errors), for unary and streaming calls. Call it before Run.
func (s *Server) MapErrors(sentinels ...grpcx.Sentinel) {
	s.errs.Sentinels = append(s.errs.Sentinels, sentinels...)
}

// Listen returns l when non-nil, else a new TCP listener on addr. It lets in-process meshes
// hand pre-bound listeners to services.
func Listen(l net.Listener, addr string) (net.Listener, error) {
	if l != nil {
		return l, nil
	}
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return lis, nil
}

// NewServer builds a server. grpcLis may be nil for services without a gRPC API (the
// gRPC server still exists for health when adminLis is given). opts follow the defaults
// (metrics, error mapping, message size); a service with a gRPC API passes its
// authentication there: auth.ServerOptions(trust) for the internal services, which then
// admit only calls signed with the internal secret (health and reflection stay open).
// Every service also passes its tracing, telemetry.Telemetry.ServerOption, which spans
// each call and continues the caller's trace.
func NewServer(name string, log *slog.Logger, grpcLis, adminLis net.Listener, opts ...grpc.ServerOption) *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), natsx.RefusedTooLarge)
	metrics := grpcx.NewServerMetrics(reg)
	errs := &grpcx.Errors{Log: log}
	opts = append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(metrics.Unary, errs.Unary),
		grpc.ChainStreamInterceptor(metrics.Stream, errs.Stream),
		grpc.MaxRecvMsgSize(8 << 20),
	}, opts...)
	s := &Server{
		Name:     name,
		Log:      log,
		GRPC:     grpc.NewServer(opts...),
		Health:   health.NewServer(),
		Registry: reg,
		grpcLis:  grpcLis,
		adminLis: adminLis,
		checks:   map[string]Check{},
		errs:     errs,
	}
	healthpb.RegisterHealthServer(s.GRPC, s.Health)
	reflection.Register(s.GRPC)
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", s.readyz)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	s.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return s
}

// AddCheck registers a readiness check.
func (s *Server) AddCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	checks := make(map[string]Check, len(s.checks))
	for k, v := range s.checks {
		checks[k] = v
	}
	s.mu.Unlock()
	failed := false
	var body []byte
	for name, c := range checks {
		if err := c(ctx); err != nil {
			failed = true
			body = fmt.Appendf(body, "%s: %v\n", name, err)
		} else {
			body = fmt.Appendf(body, "%s: ok\n", name)
		}
	}
	if failed {
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	_, _ = w.Write(body)
}

// GRPCAddr is the address the gRPC server listens on, or "".
func (s *Server) GRPCAddr() string {
	if s.grpcLis == nil {
		return ""
	}
	return s.grpcLis.Addr().String()
}

// AdminAddr is the address of the admin HTTP server, or "".
func (s *Server) AdminAddr() string {
	if s.adminLis == nil {
		return ""
	}
	return s.adminLis.Addr().String()
}

// Run serves until ctx ends, runs each worker function beside the servers, then shuts
// down gracefully: health NOT_SERVING, workers drained (their ctx cancelled), GracefulStop
// with a fallback to Stop after drainTimeout.
func (s *Server) Run(ctx context.Context, drainTimeout time.Duration, workers ...func(context.Context) error) error {
	if drainTimeout <= 0 {
		drainTimeout = 10 * time.Second
	}
	g, gctx := errgroup.WithContext(ctx)
	if s.grpcLis != nil {
		g.Go(func() error {
			if err := s.GRPC.Serve(s.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("%s grpc: %w", s.Name, err)
			}
			return nil
		})
	}
	if s.adminLis != nil {
		g.Go(func() error {
			if err := s.admin.Serve(s.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s admin: %w", s.Name, err)
			}
			return nil
		})
	}
	wctx, wcancel := context.WithCancel(gctx)
	defer wcancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		g.Go(func() error {
			defer wg.Done()
			if err := w(wctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		})
	}
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	g.Go(func() error {
		<-gctx.Done()
		s.Health.Shutdown()
		wcancel()
		wg.Wait()
		done := make(chan struct{})
		go func() {
			s.GRPC.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(drainTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			s.GRPC.Stop()
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.admin.Shutdown(sctx)
		return nil
	})
	return g.Wait()
}
