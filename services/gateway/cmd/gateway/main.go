// Command gateway runs the NoETL gateway service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/noetl/noetl/services/gateway"
)

// version is the release, set at build time (-ldflags "-X main.version=...", as the image
// build does); empty means the binary's build info (the OpenAPI document's info.version).
var version string

func main() {
	cfg, printed, err := gateway.ParseFlags(os.Args[1:])
	if err != nil {
		// One line naming each bad flag or variable and its value; no usage dump.
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	if printed {
		return
	}
	cfg.Version = version
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := gateway.Run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
