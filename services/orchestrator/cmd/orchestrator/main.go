// Command orchestrator runs the NoETL orchestrator service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/services/orchestrator"
)

func main() {
	var cfg orchestrator.Config
	fs := config.New("orchestrator")
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
	if err := orchestrator.Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}
