// Command natsnode runs one NATS server with JetStream as its own OS process, so that the
// chaos harness (package chaos) can run a three-node cluster and kill, pause and restart
// one node at a time. It takes the nats-server command line (-n, -a, -p, -js, -sd,
// --cluster, --cluster_name, --routes, ...) and, like nats-server, shuts down cleanly on
// SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	fs := flag.NewFlagSet("natsnode", flag.ExitOnError)
	opts, err := server.ConfigureOptions(fs, os.Args[1:], server.PrintServerAndExit, fs.Usage, server.PrintTLSHelpAndDie)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(2)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(1)
	}
	s.ConfigureLogger()
	if err := server.Run(s); err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(1)
	}
	s.WaitForShutdown()
}
