// Command noetl is the NoETL command-line client and the single-process development mesh
// (`noetl dev`).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/playbook"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "noetl:", errorLine(err))
		os.Exit(1)
	}
}

// errorLine is the one line main prints for a failed command: a gRPC error as its message
// and code ("playbook path is required (InvalidArgument)"), anything else as it is.
func errorLine(err error) string {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return err.Error()
	}
	st := gs.GRPCStatus()
	if st.Code() == codes.OK || st.Code() == codes.Unknown {
		return err.Error()
	}
	// Keep what wraps the status ("register x.yaml: ..."), without its "rpc error: code = ...".
	return fmt.Sprintf("%s (%s)", strings.Replace(err.Error(), st.Err().Error(), st.Message(), 1), st.Code())
}

type client struct {
	conn  *grpc.ClientConn
	cat   apiv1.CatalogServiceClient
	exe   apiv1.ExecutionServiceClient
	admin apiv1.AdminServiceClient
	cred  apiv1.CredentialServiceClient
	sched apiv1.ScheduleServiceClient
	trig  apiv1.TriggerServiceClient
	plug  apiv1.PluginServiceClient
}

func newRoot() *cobra.Command {
	gw := os.Getenv("NOETL_GATEWAY")
	if gw == "" {
		gw = "127.0.0.1:50051"
	}
	apiKey := os.Getenv("NOETL_API_KEY")
	var output string
	var tlsOpts tlsOptions
	// Errors are printed once, by main; usage only for a misused command line.
	root := &cobra.Command{Use: "noetl", Short: "NoETL workflow engine client and development mesh", SilenceUsage: true, SilenceErrors: true, Version: versionString()}
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&gw, "gateway", gw, "gateway gRPC address ($NOETL_GATEWAY)")
	root.PersistentFlags().StringVar(&apiKey, "api-key", apiKey, "API key or JWT sent to the gateway ($NOETL_API_KEY; default for a gateway on this machine: the dev mesh's admin.key)")
	root.PersistentFlags().StringVarP(&output, "output", "o", "", "output of read commands: table, json or yaml (default: a table on a terminal, else json)")
	tlsOpts.flags(root)
	dial := func() (*client, error) {
		key := apiKey
		if key == "" && !tlsOpts.enabled {
			key = devAdminKey(gw)
		}
		creds, err := tlsOpts.transport()
		if err != nil {
			return nil, err
		}
		return dialWith(gw, key, creds)
	}
	root.AddCommand(devCmd(), migrateCmd(), versionCmd(), registerCmd(dial), runCmd(dial), rerunCmd(dial), statusCmd(dial, &output), eventsCmd(dial, &output), cancelCmd(dial), apikeyCmd(dial, &output), resultCmd(dial, &output),
		executionsCmd(dial, &output), playbooksCmd(dial, &output), credentialsCmd(dial, &output), schedulesCmd(dial, &output), logsCmd(dial, &output), triggersCmd(dial, &output), systemCmd(dial, &output), pluginsCmd(dial, &output))
	return root
}

// adminKeyFile is the file of the state directory that holds the dev mesh's admin key
// (mesh.AdminKeyFile; the mesh itself is not built where `noetl dev` does not run).
const adminKeyFile = "admin.key"

// defaultStateDir is where `noetl dev` keeps its state unless told otherwise.
func defaultStateDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "noetl", "dev")
}

// devAdminKey returns the admin key that `noetl dev` wrote to the default state directory,
// when the gateway is on this machine (a dev mesh) and the file exists; else "".
func devAdminKey(gateway string) string {
	host, _, err := net.SplitHostPort(gateway)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(defaultStateDir(), adminKeyFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func emit(v any) { emitTo(os.Stdout, v) }

// emitTo writes v as indented JSON, with <, > and & as they are (a terminal is no HTML page).
func emitTo(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// dialAddr connects to the gateway at addr in plaintext, sending key (an API key or a JWT)
// when set.
func dialAddr(addr, key string) (*client, error) { return dialWith(addr, key, nil) }

// dialWith connects to the gateway at addr over creds (TLS; nil for plaintext), sending key
// when set.
func dialWith(addr, key string, creds credentials.TransportCredentials) (*client, error) {
	var opts []grpc.DialOption
	if creds != nil {
		opts = append(opts, grpc.WithTransportCredentials(creds))
	}
	if key != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer(key)))
	}
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	return &client{conn: conn, cat: apiv1.NewCatalogServiceClient(conn), exe: apiv1.NewExecutionServiceClient(conn), admin: apiv1.NewAdminServiceClient(conn), cred: apiv1.NewCredentialServiceClient(conn), sched: apiv1.NewScheduleServiceClient(conn), trig: apiv1.NewTriggerServiceClient(conn), plug: apiv1.NewPluginServiceClient(conn)}, nil
}

func registerCmd(dial func() (*client, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "register FILE",
		Short: "Register a playbook file in the catalog",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			pb, err := register(cmd.Context(), c, args[0], cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), protojson.Format(pb))
			return nil
		},
	}
}

// register registers a playbook file and prints each warning the registration answers
// with (a key it ignores, a construct it does not enforce) to warnings.
func register(ctx context.Context, c *client, file string, warnings io.Writer) (*apiv1.Playbook, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if _, err := playbook.Parse(b); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	resp, err := c.cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: string(b)})
	if err != nil {
		return nil, err
	}
	for _, w := range resp.GetPlaybook().GetWarnings() {
		_, _ = fmt.Fprintf(warnings, "noetl: warning: %s: %s\n", file, w)
	}
	return resp.GetPlaybook(), nil
}

// Outcome is what `noetl run` prints.
type Outcome struct {
	ExecutionID string          `json:"execution_id"`
	Path        string          `json:"path"`
	Status      string          `json:"status"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	FailedSteps []string        `json:"failed_steps,omitempty"`
	// RerunOf, FromStep and ReusedSteps describe a rerun (`noetl rerun`).
	RerunOf     string   `json:"rerun_of,omitempty"`
	FromStep    string   `json:"from_step,omitempty"`
	ReusedSteps []string `json:"reused_steps,omitempty"`
}

// runFile registers target when it is a file (else it is a catalog path), starts it, and
// when wait is set waits for the outcome. A non-nil watch is shown the execution's live
// progress while it runs (and implies wait).
func runFile(ctx context.Context, c *client, target string, sets, labels []string, wait bool, watching *progress) (*Outcome, error) {
	path := target
	var content string
	if _, err := os.Stat(target); err == nil {
		pb, err := register(ctx, c, target, os.Stderr)
		if err != nil {
			return nil, err
		}
		path, content = pb.GetPath(), pb.GetContent()
	}
	workload := map[string]any{}
	for _, kv := range sets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--set %q: want key=value", kv)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			val = v
		}
		workload[k] = val
	}
	w, err := structpb.NewStruct(workload)
	if err != nil {
		return nil, err
	}
	l, err := parseLabels(labels)
	if err != nil {
		return nil, err
	}
	resp, err := c.exe.StartExecution(ctx, &apiv1.StartExecutionRequest{Path: path, Workload: w, Labels: l})
	if err != nil {
		return nil, err
	}
	return follow(ctx, c, resp.GetExecutionId(), path, resp.GetVersion(), content, wait, watching)
}

// parseLabels reads --label key=value flags (the server checks the keys and values).
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// follow reports a started execution of path: at once, or when wait is set once it ended.
// A non-nil watch is shown its live progress (content, when known, is the playbook, whose
// steps it counts) and implies wait.
func follow(ctx context.Context, c *client, id, path string, version int64, content string, wait bool, watching *progress) (*Outcome, error) {
	out := &Outcome{ExecutionID: id, Path: path, Status: "RUNNING"}
	if watching != nil {
		if content == "" {
			if pb, err := c.cat.GetPlaybook(ctx, &apiv1.GetPlaybookRequest{Path: path, Version: version}); err == nil {
				content = pb.GetPlaybook().GetContent()
			}
		}
		watching.total = stepCount([]byte(content))
		if err := watch(ctx, c, id, watching); err != nil {
			return nil, err
		}
		wait = true
	}
	if !wait {
		return out, nil
	}
	x, err := waitTerminal(ctx, c, id)
	if err != nil {
		return nil, err
	}
	out.Status = strings.TrimPrefix(x.GetStatus().String(), "EXECUTION_STATUS_")
	if x.GetResult() != nil {
		out.Result, _ = protojson.Marshal(x.GetResult())
	}
	if x.GetError() != nil {
		out.Error = x.GetError().GetMessage()
	}
	out.FailedSteps = x.GetFailedSteps()
	return out, nil
}

// waitTerminal waits for a terminal status with server-side long polls (no client polling).
func waitTerminal(ctx context.Context, c *client, id string) (*apiv1.Execution, error) {
	for {
		resp, err := c.exe.WaitExecution(ctx, &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(time.Minute)})
		if err != nil {
			return nil, err
		}
		switch resp.GetExecution().GetStatus() {
		case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED, eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
			return resp.GetExecution(), nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func runCmd(dial func() (*client, error)) *cobra.Command {
	var sets, labels []string
	var wait, watching bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run FILE|PATH",
		Short: "Register a playbook file (or use a catalog path), start it, and optionally wait for the outcome",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var p *progress
			if watching {
				p = newProgress(cmd.OutOrStdout(), isTerminal(cmd.OutOrStdout()), 0)
			}
			out, err := runFile(ctx, c, args[0], sets, labels, wait, p)
			if err != nil {
				return err
			}
			emitTo(cmd.OutOrStdout(), out)
			if (wait || watching) && out.Status != "COMPLETED" {
				return errors.New("execution " + out.ExecutionID + " " + strings.ToLower(out.Status))
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "workload value key=value (value parsed as JSON when possible); repeatable")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label of the execution key=value; repeatable")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for a terminal status and print the result")
	cmd.Flags().BoolVar(&watching, "watch", false, "show live step progress (a progress bar on a terminal), then the result as --wait does")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "give up waiting after this long")
	return cmd
}

func statusCmd(dial func() (*client, error), output *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show an execution",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return showExecution(cmd, dial, *output, args[0]) },
	}
}

func eventsCmd(dial func() (*client, error), output *string) *cobra.Command {
	return &cobra.Command{
		Use:   "events ID",
		Short: "List an execution's events in seq order (-o json: one JSON object per line)",
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
			l := &listing{columns: []string{"SEQ", "TYPE", "STEP", "ATTEMPT", "COMMITTED", "DETAIL"}}
			token := ""
			for {
				resp, err := c.exe.ListExecutionEvents(cmd.Context(), &apiv1.ListExecutionEventsRequest{ExecutionId: args[0], PageSize: 500, PageToken: token})
				if err != nil {
					return err
				}
				for _, ev := range resp.GetEvents() {
					l.add(ev, strconv.FormatInt(ev.GetSeq(), 10), ev.GetType(), ev.GetStep(), attempt(ev.GetAttempt()), when(ev.GetCommitTime()), eventDetail(ev))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
}

// attempt is an event's attempt for a table, blank when the event has none.
func attempt(n int32) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(int(n))
}

// eventDetail is the one-line gist of an event for a table: its error, else its result.
func eventDetail(ev *apiv1.Event) string {
	if e := ev.GetError(); e != nil {
		return abbreviate(e.GetCode()+": "+e.GetMessage(), 100)
	}
	if r := ev.GetResultRef(); r != nil {
		return "result by reference: " + r.GetUri()
	}
	if r := ev.GetResult(); r != nil {
		b, _ := json.Marshal(r.AsInterface())
		return abbreviate(string(b), 100)
	}
	return ""
}

func rerunCmd(dial func() (*client, error)) *cobra.Command {
	var from, key string
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "rerun ID [--from STEP] [--wait]",
		Short: "Start a new execution of an execution's playbook version, workload and labels; with --from, reuse the results of the steps completed before STEP and run from STEP on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := c.exe.RerunExecution(ctx, &apiv1.RerunExecutionRequest{ExecutionId: args[0], FromStep: from, IdempotencyKey: key})
			if err != nil {
				return err
			}
			x, err := c.exe.GetExecution(ctx, &apiv1.GetExecutionRequest{ExecutionId: resp.GetExecutionId()})
			if err != nil {
				return err
			}
			out, err := follow(ctx, c, resp.GetExecutionId(), x.GetExecution().GetPath(), resp.GetVersion(), "", wait, nil)
			if err != nil {
				return err
			}
			out.RerunOf, out.FromStep, out.ReusedSteps = args[0], from, resp.GetReusedSteps()
			emitTo(cmd.OutOrStdout(), out)
			if wait && out.Status != "COMPLETED" {
				return errors.New("execution " + out.ExecutionID + " " + strings.ToLower(out.Status))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "step to run from (the original must have entered it); without it, the whole playbook runs again")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same execution")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for a terminal status and print the result")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "give up waiting after this long")
	return cmd
}

func cancelCmd(dial func() (*client, error)) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running execution",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.exe.CancelExecution(cmd.Context(), &apiv1.CancelExecutionRequest{ExecutionId: args[0], Reason: reason}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "cancel requested:", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "reason recorded in the playbook.cancelled event")
	return cmd
}

func apikeyCmd(dial func() (*client, error), output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "apikey", Short: "Create, list and revoke API keys (needs the admin role)"}
	var tenant, name string
	var roles []string
	var expires time.Duration
	create := &cobra.Command{
		Use:   "create --role ROLE [--role ROLE]... [--tenant T] [--name N] [--expires D]",
		Short: "Create an API key; its secret is printed once, alone on stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			req := &apiv1.CreateApiKeyRequest{Tenant: tenant, Roles: roles, Name: name}
			if expires > 0 {
				req.ExpireTime = timestamppb.New(time.Now().Add(expires))
			}
			resp, err := c.admin.CreateApiKey(cmd.Context(), req)
			if err != nil {
				return err
			}
			k := resp.GetApiKey()
			fmt.Fprintf(cmd.ErrOrStderr(), "created API key %s of tenant %s with roles %s; its secret is shown only now:\n", k.GetId(), k.GetTenant(), strings.Join(k.GetRoles(), ", "))
			fmt.Fprintln(cmd.OutOrStdout(), resp.GetSecret())
			return nil
		},
	}
	create.Flags().StringVar(&tenant, "tenant", "", "tenant the key acts for (default: yours; another needs the system role)")
	create.Flags().StringArrayVar(&roles, "role", nil, "role the key grants: viewer, operator, admin or system; repeatable")
	create.Flags().StringVar(&name, "name", "", "label, for example who or what uses the key")
	create.Flags().DurationVar(&expires, "expires", 0, "make the key stop working after this long (default: never)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the API keys of your tenant (never their secrets)",
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
			l := &listing{columns: []string{"ID", "TENANT", "ROLES", "NAME", "CREATED", "LAST USED", "EXPIRES", "REVOKED"}}
			token := ""
			for {
				resp, err := c.admin.ListApiKeys(cmd.Context(), &apiv1.ListApiKeysRequest{PageSize: 500, PageToken: token})
				if err != nil {
					return err
				}
				for _, k := range resp.GetApiKeys() {
					l.add(k, k.GetId(), k.GetTenant(), strings.Join(k.GetRoles(), ","), k.GetName(), when(k.GetCreateTime()), when(k.GetLastUsedTime()), when(k.GetExpireTime()), when(k.GetRevokeTime()))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key (gateways stop accepting it within their key cache TTL, 30 s by default)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.admin.RevokeApiKey(cmd.Context(), &apiv1.RevokeApiKeyRequest{Id: args[0]}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "revoked:", args[0])
			return nil
		},
	}
	fresh := &cobra.Command{
		Use:   "new",
		Short: "Print a new random API key without contacting the gateway (for NOETL_BOOTSTRAP_API_KEY)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, _, _, err := auth.NewAPIKey()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), key)
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke, fresh)
	return cmd
}
