// Command resultstore runs the NoETL resultstore service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/internal/platform/config"
	"github.com/noetl/noetl/services/resultstore"
)

func main() {
	var cfg resultstore.Config
	fs := config.New("resultstore")
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
	if err := resultstore.Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "resultstore:", err)
		os.Exit(1)
	}
}
