package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// The system commands: which system playbooks the platform runs and which tenants
// override them (every tenant's to the system role, the caller's own otherwise).

func systemCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "system", Short: "Show the system playbooks and the tenants that override them"}
	var name string
	list := &cobra.Command{
		Use:   "list [--name NAME]",
		Short: "List the system playbooks (system/<name>) and their tenant overrides (<tenant>/system/<name>)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := systemClient(c.conn).ListSystemPlaybooks(cmd.Context(), &apiv1.ListSystemPlaybooksRequest{Name: name})
			if err != nil {
				return err
			}
			l := &listing{columns: []string{"NAME", "PLAYBOOK", "VERSION", "OVERRIDDEN BY"}}
			for _, b := range resp.GetPlaybooks() {
				var by []string
				for _, o := range b.GetOverrides() {
					by = append(by, o.GetTenant()+" ("+o.GetPath()+" v"+strconv.FormatInt(o.GetVersion(), 10)+")")
				}
				l.add(b, b.GetName(), b.GetPath(), strconv.FormatInt(b.GetVersion(), 10), dash(strings.Join(by, ", ")))
			}
			return l.print(cmd.OutOrStdout(), format)
		},
	}
	list.Flags().StringVar(&name, "name", "", "only the system playbook of this name (retention, cleanup, stalled_report)")
	cmd.AddCommand(list)
	return cmd
}

// systemClient is the SystemService client over the CLI's connection.
func systemClient(conn *grpc.ClientConn) apiv1.SystemServiceClient {
	return apiv1.NewSystemServiceClient(conn)
}
