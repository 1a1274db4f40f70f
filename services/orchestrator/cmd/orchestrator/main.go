// Command orchestrator runs the NoETL orchestrator service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/services/orchestrator"
)

func main() {
	cfg, printed, err := orchestrator.ParseFlags(os.Args[1:])
	if err != nil {
		// One line naming each bad flag or variable and its value; no usage dump.
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(2)
	}
	if printed {
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
