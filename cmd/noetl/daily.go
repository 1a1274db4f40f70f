package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
)

// The daily-work commands: executions, playbooks and credentials, each read command
// printing a table on a terminal and JSON or YAML on request (-o).

// dialer connects to the gateway; output is the root's -o flag.
type dialer func() (*client, error)

func executionsCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "executions", Aliases: []string{"execution", "exec"}, Short: "List and show executions"}
	var statusName, path, tenantName string
	var labels []string
	var limit int
	list := &cobra.Command{
		Use:   "list [--status S] [--path P] [--label K=V]... [--tenant T|-] [--limit N]",
		Short: "List executions, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			st, err := parseStatus(statusName)
			if err != nil {
				return err
			}
			if limit <= 0 {
				return fmt.Errorf("--limit %d: must be positive", limit)
			}
			want, err := parseLabels(labels)
			if err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			l := &listing{columns: []string{"EXECUTION", "PLAYBOOK", "VERSION", "STATUS", "STARTED", "TOOK", "LABELS"}}
			if tenantName != "" {
				l.columns = append([]string{"EXECUTION", "TENANT"}, l.columns[1:]...)
			}
			token := ""
			for len(l.items) < limit {
				resp, err := c.exe.ListExecutions(cmd.Context(), &apiv1.ListExecutionsRequest{PageSize: int32(min(limit-len(l.items), 500)), PageToken: token, Status: st, Path: path, Labels: want, Tenant: tenantName})
				if err != nil {
					return err
				}
				for _, x := range resp.GetExecutions() {
					cells := []string{x.GetExecutionId(), x.GetPath(), strconv.FormatInt(x.GetVersion(), 10), statusWord(x.GetStatus()), when(x.GetStartTime()), took(x.GetStartTime(), x.GetEndTime()), labelText(x.GetLabels())}
					if tenantName != "" {
						cells = append([]string{cells[0], x.GetTenant()}, cells[1:]...)
					}
					l.add(x, cells...)
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
			}
			return l.print(cmd.OutOrStdout(), format)
		},
	}
	list.Flags().StringVar(&statusName, "status", "", "only executions with this status: running, completed, failed or cancelled")
	list.Flags().StringVar(&path, "path", "", "only executions of this playbook path")
	list.Flags().StringArrayVar(&labels, "label", nil, "only executions with this label key=value; repeatable (all must match)")
	list.Flags().StringVar(&tenantName, "tenant", "", "only executions of this tenant, or - for every tenant (another tenant needs the system role; default: the key's own)")
	list.Flags().IntVar(&limit, "limit", 50, "most executions to list")
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show an execution (as `noetl status`)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return showExecution(cmd, dial, *output, args[0]) },
	}
	cmd.AddCommand(list, get)
	return cmd
}

// showExecution prints an execution: its fields and a line per step for a table.
func showExecution(cmd *cobra.Command, dial dialer, output, id string) error {
	format, err := outputFormat(output, cmd.OutOrStdout())
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer func() { _ = c.conn.Close() }()
	resp, err := c.exe.GetExecution(cmd.Context(), &apiv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return err
	}
	x := resp.GetExecution()
	rows := [][2]string{
		{"Execution", x.GetExecutionId()},
		{"Playbook", fmt.Sprintf("%s (version %d)", x.GetPath(), x.GetVersion())},
		{"Status", statusWord(x.GetStatus())},
		{"Started", when(x.GetStartTime())},
		{"Ended", when(x.GetEndTime())},
		{"Took", took(x.GetStartTime(), x.GetEndTime())},
	}
	if p := x.GetParentExecutionId(); p != "" {
		rows = append(rows, [2]string{"Parent", p})
	}
	if len(x.GetLabels()) > 0 {
		rows = append(rows, [2]string{"Labels", labelText(x.GetLabels())})
	}
	if r := x.GetRerunOf(); r != "" {
		from := "the start"
		if x.GetFromStep() != "" {
			from = "step " + x.GetFromStep()
		}
		rows = append(rows, [2]string{"Rerun of", r + " from " + from})
	}
	if e := x.GetError(); e != nil {
		rows = append(rows, [2]string{"Error", e.GetCode() + ": " + e.GetMessage()})
	}
	if r := x.GetResult(); r != nil {
		b, _ := json.Marshal(r.AsInterface())
		rows = append(rows, [2]string{"Result", abbreviate(string(b), 200)})
	}
	if err := printOne(cmd.OutOrStdout(), format, x, rows); err != nil {
		return err
	}
	if format != formatTable || len(x.GetSteps()) == 0 {
		return nil
	}
	names := make([]string, 0, len(x.GetSteps()))
	for n := range x.GetSteps() {
		names = append(names, n)
	}
	sort.Strings(names)
	steps := &listing{columns: []string{"STEP", "STATUS", "ENTERED", "ERROR"}}
	for _, n := range names {
		s := x.GetSteps()[n]
		st := strings.TrimPrefix(s.GetStatus().String(), "STEP_STATUS_")
		if s.GetReused() {
			st += " (reused)"
		}
		steps.add(s, n, st, strconv.Itoa(int(s.GetEpoch())), abbreviate(s.GetError().GetMessage(), 80))
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return steps.print(cmd.OutOrStdout(), formatTable)
}

// labelText shows labels as k=v pairs in key order, comma-separated.
func labelText(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

func playbooksCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "playbooks", Aliases: []string{"playbook", "pb"}, Short: "List, show and compare catalog playbooks"}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the latest version of every playbook",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listPlaybooks(cmd, dial, *output, "")
		},
	}
	versions := &cobra.Command{
		Use:   "versions PATH",
		Short: "List every version of a playbook, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return listPlaybooks(cmd, dial, *output, args[0])
		},
	}
	var version int64
	get := &cobra.Command{
		Use:   "get PATH [--version N]",
		Short: "Print a playbook's YAML source (the latest version unless --version)",
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
			resp, err := c.cat.GetPlaybook(cmd.Context(), &apiv1.GetPlaybookRequest{Path: args[0], Version: version})
			if err != nil {
				return err
			}
			if format == formatTable {
				// The source itself is what a person reads.
				_, err := io.WriteString(cmd.OutOrStdout(), ensureNewline(resp.GetPlaybook().GetContent()))
				return err
			}
			return printOne(cmd.OutOrStdout(), format, resp.GetPlaybook(), nil)
		},
	}
	get.Flags().Int64Var(&version, "version", 0, "version to print (default: the latest)")
	diff := &cobra.Command{
		Use:   "diff PATH [FROM [TO]]",
		Short: "Show what changed between two versions of a playbook (default: the latest against the one before it)",
		Args:  cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			var from, to int64
			for i, a := range args[1:] {
				v, err := strconv.ParseInt(a, 10, 64)
				if err != nil || v <= 0 {
					return fmt.Errorf("version %q: want a positive number", a)
				}
				if i == 0 {
					from = v
				} else {
					to = v
				}
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			ctx := cmd.Context()
			read := func(v int64) (*apiv1.Playbook, error) {
				resp, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: args[0], Version: v})
				return resp.GetPlaybook(), err
			}
			newer, err := read(to)
			if err != nil {
				return err
			}
			if from == 0 {
				if newer.GetVersion() == 1 {
					return fmt.Errorf("playbook %q has one version: nothing to compare", args[0])
				}
				from = newer.GetVersion() - 1
			}
			older, err := read(from)
			if err != nil {
				return err
			}
			text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A:        difflib.SplitLines(ensureNewline(older.GetContent())),
				B:        difflib.SplitLines(ensureNewline(newer.GetContent())),
				FromFile: fmt.Sprintf("%s version %d", args[0], older.GetVersion()),
				ToFile:   fmt.Sprintf("%s version %d", args[0], newer.GetVersion()),
				Context:  3,
			})
			if err != nil {
				return err
			}
			if text == "" {
				text = fmt.Sprintf("versions %d and %d of %s are identical\n", older.GetVersion(), newer.GetVersion(), args[0])
			}
			_, err = io.WriteString(cmd.OutOrStdout(), text)
			return err
		},
	}
	cmd.AddCommand(list, versions, get, diff)
	return cmd
}

// listPlaybooks prints the catalog, or the versions of path when it is set.
func listPlaybooks(cmd *cobra.Command, dial dialer, output, path string) error {
	format, err := outputFormat(output, cmd.OutOrStdout())
	if err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer func() { _ = c.conn.Close() }()
	l := &listing{columns: []string{"PATH", "VERSION", "NAME", "REGISTERED", "WARNINGS"}}
	token := ""
	for {
		resp, err := c.cat.ListPlaybooks(cmd.Context(), &apiv1.ListPlaybooksRequest{PageSize: 500, PageToken: token, Path: path})
		if err != nil {
			return err
		}
		for _, p := range resp.GetPlaybooks() {
			l.add(p, p.GetPath(), strconv.FormatInt(p.GetVersion(), 10), p.GetName(), when(p.GetCreateTime()), strconv.Itoa(len(p.GetWarnings())))
		}
		if token = resp.GetNextPageToken(); token == "" {
			return l.print(cmd.OutOrStdout(), format)
		}
	}
}

func credentialsCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "credentials", Aliases: []string{"credential", "cred"}, Short: "Store, list and delete credentials (needs the admin role; data is never shown)"}
	var typ, data, file string
	set := &cobra.Command{
		Use:   "set NAME --type T (--data JSON | --from-file F)",
		Short: "Store a credential, replacing one of the same name (--from-file - reads stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			switch {
			case data != "" && file != "":
				return errors.New("--data and --from-file: give one")
			case data != "":
				raw = []byte(data)
			case file == "-":
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
				if err != nil {
					return err
				}
				raw = b
			case file != "":
				b, err := os.ReadFile(file)
				if err != nil {
					return err
				}
				raw = b
			default:
				return errors.New("--data or --from-file: the credential's data, a JSON object, is required")
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil || m == nil {
				// Never quote the data: it is secret.
				return errors.New("credential data: must be a JSON object")
			}
			s, err := structpb.NewStruct(m)
			if err != nil {
				return fmt.Errorf("credential data: %v", err)
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.cred.PutCredential(cmd.Context(), &apiv1.PutCredentialRequest{Name: args[0], Type: typ, Data: s}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "stored:", args[0])
			return nil
		},
	}
	set.Flags().StringVar(&typ, "type", "", `credential type, for example "postgres" or "http_bearer"`)
	set.Flags().StringVar(&data, "data", "", "the credential's data as a JSON object (visible in the shell's history: prefer --from-file)")
	set.Flags().StringVar(&file, "from-file", "", "read the data (a JSON object) from this file, or stdin for -")
	list := &cobra.Command{
		Use:   "list",
		Short: "List credential names and types",
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
			l := &listing{columns: []string{"NAME", "TYPE", "UPDATED"}}
			token := ""
			for {
				resp, err := c.cred.ListCredentials(cmd.Context(), &apiv1.ListCredentialsRequest{PageSize: 500, PageToken: token})
				if err != nil {
					return err
				}
				for _, k := range resp.GetCredentials() {
					l.add(k, k.GetName(), k.GetType(), when(k.GetUpdateTime()))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a credential",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.cred.DeleteCredential(cmd.Context(), &apiv1.DeleteCredentialRequest{Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "deleted:", args[0])
			return nil
		},
	}
	cmd.AddCommand(set, list, del)
	return cmd
}

// parseStatus reads an execution status as a person writes it (running, COMPLETED,
// EXECUTION_STATUS_FAILED); "" is any status.
func parseStatus(s string) (eventv1.ExecutionStatus, error) {
	if s == "" {
		return eventv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED, nil
	}
	name := "EXECUTION_STATUS_" + strings.TrimPrefix(strings.ToUpper(s), "EXECUTION_STATUS_")
	v, ok := eventv1.ExecutionStatus_value[name]
	if !ok || v == 0 {
		return 0, fmt.Errorf("--status %q: want running, completed, failed or cancelled", s)
	}
	return eventv1.ExecutionStatus(v), nil
}

// statusWord is an execution status for a table: COMPLETED.
func statusWord(s eventv1.ExecutionStatus) string {
	return strings.TrimPrefix(s.String(), "EXECUTION_STATUS_")
}

// abbreviate cuts s to at most n characters (on a rune boundary), marking the cut.
func abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func ensureNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}
