package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// logsCmd is `noetl logs ID`: the step logs of an execution (what its python and shell
// steps printed, the diagnostic lines of http and postgres), all of them or one step's,
// and with --follow the logs of the commands still to end, until the execution ends.
func logsCmd(dial dialer, output *string) *cobra.Command {
	var step string
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID [--step S] [--follow]",
		Short: "Print an execution's step logs (stdout, stderr and diagnostics of its tools)",
		Long: "Print an execution's step logs: for each command, what its tools wrote to stdout and\n" +
			"stderr and the diagnostic lines they add (an HTTP request's method, URL and status; a\n" +
			"SQL script's statements and rows), each stream's last 64 KiB with secrets masked.\n" +
			"--follow keeps printing as commands end, until the execution ends. As a table, each\n" +
			"line of text is one row: STEP, STREAM and the line.",
		Args: cobra.ExactArgs(1),
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
			p := newLogPrinter(cmd.OutOrStdout(), format)
			if follow {
				err = followLogs(cmd.Context(), c, args[0], step, p)
			} else {
				err = listLogs(cmd.Context(), c, args[0], step, p)
			}
			if ferr := p.flush(); err == nil {
				err = ferr
			}
			return err
		},
	}
	cmd.Flags().StringVar(&step, "step", "", "only the logs of this step")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing the logs of commands as they end, until the execution ends")
	return cmd
}

// listLogs prints every page of the execution's logs.
func listLogs(ctx context.Context, c *client, id, step string, p *logPrinter) error {
	token := ""
	for {
		resp, err := c.exe.ListExecutionLogs(ctx, &apiv1.ListExecutionLogsRequest{ExecutionId: id, Step: step, PageToken: token})
		if err != nil {
			return err
		}
		for _, e := range resp.GetEntries() {
			if err := p.print(e); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

// followLogs prints the execution's logs as WatchExecutionLogs streams them, resuming
// after the last command received when the gateway is unavailable or busy, as watch does.
func followLogs(ctx context.Context, c *client, id, step string, p *logPrinter) error {
	var after int64
	failures := 0
	for {
		stream, err := c.exe.WatchExecutionLogs(ctx, &apiv1.WatchExecutionLogsRequest{ExecutionId: id, Step: step, AfterSeq: after})
		for err == nil {
			var m *apiv1.WatchExecutionLogsResponse
			if m, err = stream.Recv(); err != nil {
				break
			}
			for _, e := range m.GetEntries() {
				if err = p.print(e); err != nil {
					return err
				}
			}
			if err = p.flush(); err != nil {
				return err
			}
			after, failures = m.GetSeq(), 0
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		st := status.Convert(err)
		if code := st.Code(); (code != codes.Unavailable && code != codes.ResourceExhausted) || failures >= watchRetries {
			return err
		}
		failures++
		delay := time.Duration(failures) * 200 * time.Millisecond
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = max(delay, ri.GetRetryDelay().AsDuration())
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// logPrinter writes log entries as they come: a table row per line of text, a JSON object
// per entry (JSON Lines), or a YAML document per entry.
type logPrinter struct {
	w      io.Writer
	format string
	tw     *tabwriter.Writer
	yaml   *yaml.Encoder
	header bool
}

func newLogPrinter(w io.Writer, format string) *logPrinter {
	p := &logPrinter{w: w, format: format}
	switch format {
	case formatTable:
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	case formatYAML:
		p.yaml = yaml.NewEncoder(w)
		p.yaml.SetIndent(2)
	}
	return p
}

func (p *logPrinter) print(e *apiv1.LogEntry) error {
	switch p.format {
	case formatJSON:
		b, err := protojson.Marshal(e)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(p.w, string(b))
		return err
	case formatYAML:
		v, err := plain(e)
		if err != nil {
			return err
		}
		return p.yaml.Encode(v)
	}
	if !p.header {
		fmt.Fprintln(p.tw, "STEP\tSTREAM\tTEXT")
		p.header = true
	}
	where := e.GetStep()
	if i := e.GetIteration(); i != nil && i.GetIndex() >= 0 {
		where += fmt.Sprintf("[%d]", i.GetIndex())
	}
	if e.GetAttempt() > 1 {
		where += fmt.Sprintf(" (attempt %d)", e.GetAttempt())
	}
	stream := e.GetStream()
	if t := e.GetTool(); t != "" {
		stream = t + " " + stream
	}
	if e.GetTruncated() {
		fmt.Fprintf(p.tw, "%s\t%s\t[truncated: the last %d of %d bytes]\n", where, stream, len(e.GetText()), e.GetTotalBytes())
	}
	for _, line := range strings.Split(strings.TrimSuffix(e.GetText(), "\n"), "\n") {
		fmt.Fprintf(p.tw, "%s\t%s\t%s\n", where, stream, strings.TrimRight(line, "\r"))
	}
	return nil
}

// flush writes what a table or YAML holds back.
func (p *logPrinter) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}
