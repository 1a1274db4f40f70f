// Command gateway runs the NoETL gateway service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/services/gateway"
)

func main() {
	var cfg gateway.Config
	fs := config.New("gateway")
	cfg.Flags(fs)
	if printed, err := fs.Parse(os.Args[1:]); err != nil || printed {
		if err != nil {
			os.Exit(2)
		}
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
