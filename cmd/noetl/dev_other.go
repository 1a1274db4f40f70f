//go:build !unix

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// devCmd is `noetl dev`, which needs a Unix system: the mesh runs a private Postgres
// cluster and manages its processes with Unix process groups and signals.
func devCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dev",
		Short: "Run the whole mesh in one process (Linux or macOS)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("noetl dev runs on Linux or macOS (use WSL on Windows); this CLI can still talk to a gateway elsewhere with --gateway")
		},
	}
}
