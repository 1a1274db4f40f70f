package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// The trigger commands: create, list, show and delete the caller's tenant's triggers
// (creating and deleting need the admin role).

func triggersCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Aliases: []string{"triggers"}, Short: "Create, list and delete triggers that start executions on a webhook call or a NATS message"}
	var path, workload, subject, stream string
	var version int64
	var webhook bool
	create := &cobra.Command{
		Use:   "create NAME --path P (--webhook | --subject S [--stream X]) [--version N] [--workload JSON]",
		Short: "Create a trigger of a catalog playbook; a webhook trigger's signing secret is printed once",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			tr := &apiv1.Trigger{Name: args[0], Path: path, Version: version}
			switch {
			case webhook == (subject != ""):
				return errors.New("--webhook or --subject: give exactly one")
			case webhook:
				if stream != "" {
					return errors.New("--stream: only with --subject")
				}
				tr.Source = &apiv1.Trigger_Webhook{Webhook: &apiv1.WebhookSource{}}
			default:
				tr.Source = &apiv1.Trigger_Nats{Nats: &apiv1.NatsSource{Subject: subject, Stream: stream}}
			}
			if workload != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(workload), &m); err != nil || m == nil {
					return fmt.Errorf("--workload: must be a JSON object")
				}
				if tr.Workload, err = structpb.NewStruct(m); err != nil {
					return fmt.Errorf("--workload: %v", err)
				}
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.trig.CreateTrigger(cmd.Context(), &apiv1.CreateTriggerRequest{Trigger: tr})
			if err != nil {
				return err
			}
			rows := triggerRows(resp.GetTrigger())
			if s := resp.GetSecret(); s != "" {
				rows = append(rows, [2]string{"Secret", s + " (shown once: sign each body with it, HMAC-SHA256, as X-Noetl-Signature: sha256=<hex>)"})
			}
			if format != formatTable {
				return printOne(cmd.OutOrStdout(), format, resp, nil)
			}
			return printOne(cmd.OutOrStdout(), format, resp, rows)
		},
	}
	create.Flags().StringVar(&path, "path", "", "catalog path of the playbook (required)")
	create.Flags().Int64Var(&version, "version", 0, "pinned version (default: the latest at each delivery)")
	create.Flags().StringVar(&workload, "workload", "", "JSON object merged over the playbook's workload (each delivery's body is merged over it)")
	create.Flags().BoolVar(&webhook, "webhook", false, "a webhook trigger: POST /v1/triggers/NAME, signed with the secret printed once")
	create.Flags().StringVar(&subject, "subject", "", "a NATS trigger: the JetStream subject whose messages each start an execution")
	create.Flags().StringVar(&stream, "stream", "", "the JetStream stream of --subject (default: the stream that captures it)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List triggers with their last execution",
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
			l := &listing{columns: []string{"NAME", "PLAYBOOK", "SOURCE", "LAST FIRED", "LAST EXECUTION"}}
			token := ""
			for {
				resp, err := c.trig.ListTriggers(cmd.Context(), &apiv1.ListTriggersRequest{PageSize: 500, PageToken: token})
				if err != nil {
					return err
				}
				for _, tr := range resp.GetTriggers() {
					l.add(tr, tr.GetName(), triggerPlaybook(tr), sourceText(tr), when(tr.GetLastFireTime()), dash(tr.GetLastExecutionId()))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a trigger",
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
			resp, err := c.trig.GetTrigger(cmd.Context(), &apiv1.GetTriggerRequest{Name: args[0]})
			if err != nil {
				return err
			}
			return printOne(cmd.OutOrStdout(), format, resp.GetTrigger(), triggerRows(resp.GetTrigger()))
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a trigger (the executions it started stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.trig.DeleteTrigger(cmd.Context(), &apiv1.DeleteTriggerRequest{Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "deleted:", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, get, del)
	return cmd
}

// triggerRows are a trigger's table lines.
func triggerRows(tr *apiv1.Trigger) [][2]string {
	rows := [][2]string{
		{"Name", tr.GetName()},
		{"Id", tr.GetId()},
		{"Playbook", triggerPlaybook(tr)},
		{"Source", sourceText(tr)},
		{"Last fired", when(tr.GetLastFireTime())},
		{"Last execution", dash(tr.GetLastExecutionId())},
		{"Created", when(tr.GetCreateTime()) + " by " + dash(tr.GetCreatedBy())},
	}
	if tr.GetWorkload() != nil {
		b, _ := json.Marshal(tr.GetWorkload().AsMap())
		rows = append(rows, [2]string{"Workload", abbreviate(string(b), 200)})
	}
	return rows
}

func triggerPlaybook(tr *apiv1.Trigger) string {
	if tr.GetVersion() > 0 {
		return tr.GetPath() + " (version " + strconv.FormatInt(tr.GetVersion(), 10) + ")"
	}
	return tr.GetPath() + " (latest)"
}

func sourceText(tr *apiv1.Trigger) string {
	if n := tr.GetNats(); n != nil {
		return "nats " + n.GetSubject() + " (stream " + n.GetStream() + ")"
	}
	return "webhook POST /v1/triggers/" + tr.GetName()
}
