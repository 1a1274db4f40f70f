package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// The plug-in commands: register a WebAssembly module as the next version of its path,
// list the tenant's plug-ins or one path's versions, and show one version
// (docs/plugins.md).

func pluginsCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "plugin", Aliases: []string{"plugins"}, Short: "Register and list WebAssembly plug-ins (tool kind wasm)"}
	var description string
	register := &cobra.Command{
		Use:   "register PATH FILE.wasm [--description TEXT]",
		Short: "Store a WebAssembly module as the next version of PATH (the same bytes again answer the latest version)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			mod, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			// Compressed, a Go module fits the gateway's body limit; the orchestrator
			// stores it uncompressed.
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			if _, err := zw.Write(mod); err != nil {
				return err
			}
			if err := zw.Close(); err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.plug.RegisterPlugin(cmd.Context(), &apiv1.RegisterPluginRequest{Path: args[0], Module: z.Bytes(), Description: description})
			if err != nil {
				return err
			}
			rows := pluginRows(resp.GetPlugin())
			if resp.GetUnchanged() {
				rows = append(rows, [2]string{"Unchanged", "the bytes equal the latest version's: nothing new was stored"})
			}
			return printOne(cmd.OutOrStdout(), format, resp, rows)
		},
	}
	register.Flags().StringVar(&description, "description", "", "free text stored with the version")
	var versionsOf string
	list := &cobra.Command{
		Use:   "list [--versions PATH]",
		Short: "List the plug-ins (each one's latest version), or the versions of one path",
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
			l := &listing{columns: []string{"PATH", "VERSION", "SHA256", "SIZE", "CREATED"}}
			token := ""
			for {
				resp, err := c.plug.ListPlugins(cmd.Context(), &apiv1.ListPluginsRequest{PageSize: 500, PageToken: token, Path: versionsOf})
				if err != nil {
					return err
				}
				for _, p := range resp.GetPlugins() {
					l.add(p, p.GetPath(), strconv.FormatInt(p.GetVersion(), 10), abbreviate(p.GetContentSha256(), 12), strconv.FormatInt(p.GetSizeBytes(), 10), when(p.GetCreateTime()))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
	list.Flags().StringVar(&versionsOf, "versions", "", "list the versions of this path, newest first")
	var version int64
	get := &cobra.Command{
		Use:   "get PATH [--version N]",
		Short: "Show a plug-in version (the latest by default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.plug.GetPlugin(cmd.Context(), &apiv1.GetPluginRequest{Path: args[0], Version: version})
			if err != nil {
				return err
			}
			return printOne(cmd.OutOrStdout(), format, resp.GetPlugin(), pluginRows(resp.GetPlugin()))
		},
	}
	get.Flags().Int64Var(&version, "version", 0, "the version (default: the latest)")
	cmd.AddCommand(register, list, get)
	return cmd
}

// pluginRows are a plug-in version's table lines.
func pluginRows(p *apiv1.Plugin) [][2]string {
	rows := [][2]string{
		{"Path", p.GetPath()},
		{"Version", strconv.FormatInt(p.GetVersion(), 10)},
		{"SHA256", p.GetContentSha256()},
		{"Size", fmt.Sprintf("%d bytes", p.GetSizeBytes())},
		{"Created", when(p.GetCreateTime()) + " by " + dash(p.GetCreatedBy())},
	}
	if d := p.GetDescription(); d != "" {
		rows = append(rows, [2]string{"Description", d})
	}
	return rows
}
