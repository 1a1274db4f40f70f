// Command statebuilder runs the NoETL statebuilder service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/services/statebuilder"
)

func main() {
	var cfg statebuilder.Config
	fs := config.New("statebuilder")
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
	if err := statebuilder.Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "statebuilder:", err)
		os.Exit(1)
	}
}
