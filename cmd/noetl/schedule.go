package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
)

// The schedule commands: create, list, show, preview, pause, resume and delete the
// caller's tenant's schedules (creating and deleting need the admin role, pausing and
// resuming the operator role).

// timingFlags are the flags that say when a schedule fires.
type timingFlags struct {
	cron, tz string
	every    time.Duration
}

func (f *timingFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.cron, "cron", "", `cron expression of 5 fields, or 6 with seconds first, or a descriptor such as @daily`)
	cmd.Flags().DurationVar(&f.every, "every", 0, "fixed interval between ticks instead of --cron (at least 1s)")
	cmd.Flags().StringVar(&f.tz, "tz", "", "IANA time zone the cron expression is read in (default UTC)")
}

func (f *timingFlags) apply(s *apiv1.Schedule) error {
	if (f.cron == "") == (f.every == 0) {
		return errors.New("--cron or --every: give exactly one")
	}
	s.Cron, s.TimeZone = f.cron, f.tz
	if f.every != 0 {
		s.Interval = durationpb.New(f.every)
	}
	return nil
}

func schedulesCmd(dial dialer, output *string) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Aliases: []string{"schedules", "sched"}, Short: "Create, list, pause, resume and delete schedules that start executions"}
	var tf timingFlags
	var path, workload, catchUp string
	var version int64
	var maxCatchUp int32
	create := &cobra.Command{
		Use:   "create NAME --path P (--cron EXPR [--tz ZONE] | --every D) [--version N] [--workload JSON] [--catch-up skip|latest|all] [--max-catch-up N]",
		Short: "Create a schedule of a catalog playbook",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			s := &apiv1.Schedule{Name: args[0], Path: path, Version: version, CatchUp: catchUp, MaxCatchUp: maxCatchUp}
			if err := tf.apply(s); err != nil {
				return err
			}
			if workload != "" {
				var m map[string]any
				if err := json.Unmarshal([]byte(workload), &m); err != nil || m == nil {
					return fmt.Errorf("--workload: must be a JSON object")
				}
				if s.Workload, err = structpb.NewStruct(m); err != nil {
					return fmt.Errorf("--workload: %v", err)
				}
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.sched.CreateSchedule(cmd.Context(), &apiv1.CreateScheduleRequest{Schedule: s})
			if err != nil {
				return err
			}
			return printOne(cmd.OutOrStdout(), format, resp.GetSchedule(), scheduleRows(resp.GetSchedule(), nil))
		},
	}
	tf.bind(create)
	create.Flags().StringVar(&path, "path", "", "catalog path of the playbook (required)")
	create.Flags().Int64Var(&version, "version", 0, "pinned version (default: the latest at each tick)")
	create.Flags().StringVar(&workload, "workload", "", "JSON object merged over the playbook's workload at each tick")
	create.Flags().StringVar(&catchUp, "catch-up", "", "ticks missed while no orchestrator ran: skip (default), latest or all")
	create.Flags().Int32Var(&maxCatchUp, "max-catch-up", 0, "most missed ticks --catch-up all runs (default 10)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List schedules with their next tick",
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
			l := &listing{columns: []string{"NAME", "PLAYBOOK", "WHEN", "CATCH-UP", "STATE", "NEXT", "LAST EXECUTION"}}
			token := ""
			for {
				resp, err := c.sched.ListSchedules(cmd.Context(), &apiv1.ListSchedulesRequest{PageSize: 500, PageToken: token})
				if err != nil {
					return err
				}
				for _, s := range resp.GetSchedules() {
					l.add(s, s.GetName(), playbookText(s), whenText(s), s.GetCatchUp(), stateText(s), when(s.GetNextFireTime()), dash(s.GetLastExecutionId()))
				}
				if token = resp.GetNextPageToken(); token == "" {
					return l.print(cmd.OutOrStdout(), format)
				}
			}
		},
	}
	var count int32
	get := &cobra.Command{
		Use:   "get NAME [--count N]",
		Short: "Show a schedule and its next fire times",
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
			resp, err := c.sched.GetSchedule(cmd.Context(), &apiv1.GetScheduleRequest{Name: args[0], Preview: count})
			if err != nil {
				return err
			}
			if format != formatTable {
				return printOne(cmd.OutOrStdout(), format, resp, nil)
			}
			return printOne(cmd.OutOrStdout(), format, resp, scheduleRows(resp.GetSchedule(), resp.GetNextFireTimes()))
		},
	}
	get.Flags().Int32Var(&count, "count", 5, "how many next fire times to show")
	var ptf timingFlags
	var pcount int32
	preview := &cobra.Command{
		Use:   "preview (--cron EXPR [--tz ZONE] | --every D) [--count N]",
		Short: "Check a timing and print its next fire times, storing nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(*output, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			s := &apiv1.Schedule{}
			if err := ptf.apply(s); err != nil {
				return err
			}
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.sched.PreviewSchedule(cmd.Context(), &apiv1.PreviewScheduleRequest{Schedule: s, Count: pcount})
			if err != nil {
				return err
			}
			if format != formatTable {
				return printOne(cmd.OutOrStdout(), format, resp, nil)
			}
			for _, ts := range resp.GetNextFireTimes() {
				fmt.Fprintln(cmd.OutOrStdout(), ts.AsTime().Format(time.RFC3339))
			}
			return nil
		},
	}
	ptf.bind(preview)
	preview.Flags().Int32Var(&pcount, "count", 5, "how many fire times")
	pause := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a schedule: no tick until it is resumed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.sched.PauseSchedule(cmd.Context(), &apiv1.PauseScheduleRequest{Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "paused:", args[0])
			return nil
		},
	}
	resume := &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused schedule from its next tick (the ticks missed while paused do not run)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			resp, err := c.sched.ResumeSchedule(cmd.Context(), &apiv1.ResumeScheduleRequest{Name: args[0]})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resumed: %s (next tick %s)\n", args[0], when(resp.GetSchedule().GetNextFireTime()))
			return nil
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the executions it started stay)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dial()
			if err != nil {
				return err
			}
			defer func() { _ = c.conn.Close() }()
			if _, err := c.sched.DeleteSchedule(cmd.Context(), &apiv1.DeleteScheduleRequest{Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "deleted:", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, get, preview, pause, resume, del)
	return cmd
}

// scheduleRows are a schedule's table lines, with next fire times when given.
func scheduleRows(s *apiv1.Schedule, next []*timestamppb.Timestamp) [][2]string {
	rows := [][2]string{
		{"Name", s.GetName()},
		{"Playbook", playbookText(s)},
		{"When", whenText(s)},
		{"Catch-up", catchUpText(s)},
		{"State", stateText(s)},
		{"Next", when(s.GetNextFireTime())},
		{"Last tick", when(s.GetLastFireTime())},
		{"Last execution", dash(s.GetLastExecutionId())},
		{"Created", when(s.GetCreateTime()) + " by " + dash(s.GetCreatedBy())},
	}
	if s.GetWorkload() != nil {
		b, _ := json.Marshal(s.GetWorkload().AsMap())
		rows = append(rows, [2]string{"Workload", abbreviate(string(b), 200)})
	}
	if len(next) > 0 {
		t := make([]string, len(next))
		for i, ts := range next {
			t[i] = when(ts)
		}
		rows = append(rows, [2]string{"Next ticks", strings.Join(t, ", ")})
	}
	return rows
}

func playbookText(s *apiv1.Schedule) string {
	if s.GetVersion() > 0 {
		return s.GetPath() + " (version " + strconv.FormatInt(s.GetVersion(), 10) + ")"
	}
	return s.GetPath() + " (latest)"
}

func whenText(s *apiv1.Schedule) string {
	if d := s.GetInterval(); d != nil {
		return "every " + d.AsDuration().String()
	}
	return s.GetCron() + " " + s.GetTimeZone()
}

func catchUpText(s *apiv1.Schedule) string {
	if s.GetCatchUp() == "all" {
		return fmt.Sprintf("all (at most %d)", s.GetMaxCatchUp())
	}
	return s.GetCatchUp()
}

func stateText(s *apiv1.Schedule) string {
	if s.GetPaused() {
		return "paused"
	}
	return "active"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
