package api

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
)

// Bounds of one ListExecutionLogs call.
const (
	// defaultLogPage and maxLogPage bound the entries of a page.
	defaultLogPage = 200
	maxLogPage     = 1000
	// maxLogPageText bounds the text of a page: it ends after the command that passes it.
	maxLogPageText = 8 << 20
	// maxLogScan bounds the events one call reads looking for logs; past them the page
	// ends with a token to go on from.
	maxLogScan = 10000
	// maxStepName bounds a step filter.
	maxStepName = 256
)

// validStep checks an optional step filter.
func validStep(field, step string) error {
	if len(step) > maxStepName || strings.ContainsRune(step, 0) {
		return invalid(field, "must be a step name")
	}
	return nil
}

// ListExecutionLogs implements ExecutionService: the step logs the outcome events carry
// (domain.LogsKey), read through the statebuilder's event list for the caller's tenant,
// those held by reference read from the resultstore.
func (s *Server) ListExecutionLogs(ctx context.Context, req *apiv1.ListExecutionLogsRequest) (*apiv1.ListExecutionLogsResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if err := validStep("step", req.GetStep()); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, invalid("page_size", "must not be negative")
	case size == 0:
		size = defaultLogPage
	case size > maxLogPage:
		size = maxLogPage
	}
	var after int64
	if t := req.GetPageToken(); t != "" {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 {
			return nil, invalid("page_token", "malformed")
		}
		after = n
	}
	out := &apiv1.ListExecutionLogsResponse{}
	text, scanned := 0, 0
	for {
		resp, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: req.GetExecutionId(), AfterSeq: after, PageSize: 1000, Tenant: tenant(ctx)})
		if err != nil {
			return nil, err
		}
		evs := resp.GetEvents()
		for i, ev := range evs {
			scanned++
			after = ev.GetSeq()
			entries := s.logEntries(ctx, ev, req.GetStep())
			out.Entries = append(out.Entries, entries...)
			for _, e := range entries {
				text += len(e.GetText())
			}
			if len(out.Entries) >= size || text >= maxLogPageText || scanned >= maxLogScan {
				if i < len(evs)-1 || resp.GetNextAfterSeq() > 0 {
					out.NextPageToken = strconv.FormatInt(after, 10)
				}
				return out, nil
			}
		}
		if resp.GetNextAfterSeq() <= 0 || len(evs) == 0 {
			return out, nil
		}
		after = resp.GetNextAfterSeq()
	}
}

// WatchExecutionLogs implements ExecutionService: the orchestrator's watch of the
// execution, each outcome event that carries logs (of the step asked for) one response,
// and the terminal event a last one, with no entries.
func (s *Server) WatchExecutionLogs(req *apiv1.WatchExecutionLogsRequest, stream grpc.ServerStreamingServer[apiv1.WatchExecutionLogsResponse]) error {
	if err := validStep("step", req.GetStep()); err != nil {
		return err
	}
	ctx := stream.Context()
	return s.watchEvents(stream, req.GetExecutionId(), req.GetAfterSeq(), func(ev *eventv1.Event) error {
		entries := s.logEntries(ctx, ev, req.GetStep())
		if len(entries) == 0 && !domain.IsTerminal(ev.GetType()) {
			return nil
		}
		return stream.Send(&apiv1.WatchExecutionLogsResponse{Entries: entries, Seq: ev.GetSeq(), End: domain.IsTerminal(ev.GetType())})
	})
}

// logEntries returns the step logs ev carries (none when it carries none, or concerns
// another step than step, when set). Logs held by reference are read from the
// resultstore; when they cannot be (expired, the store down) one diagnostic entry says so
// rather than failing the whole read.
func (s *Server) logEntries(ctx context.Context, ev *eventv1.Event, step string) []*apiv1.LogEntry {
	if step != "" && ev.GetStep() != step {
		return nil
	}
	logs, ok := domain.LogsOf(ev.GetPayloadJson())
	if !ok {
		return nil
	}
	texts := logs.Entries
	if logs.Ref != "" {
		texts = nil
		r, err := s.Results.ReadResult(ctx, &rsv1.ReadResultRequest{Tenant: tenant(ctx), Uri: logs.Ref})
		if err == nil {
			err = json.Unmarshal(r.GetJson(), &texts)
		}
		if err != nil {
			texts = []domain.LogText{{Stream: "diagnostic", Truncated: true, Bytes: logs.Bytes,
				Text: "the logs of this command, held by reference (" + logs.Ref + "), cannot be read: " + status.Convert(err).Message() + "\n"}}
			if status.Code(err) == codes.NotFound {
				texts[0].Text = "the logs of this command, held by reference, have expired\n"
			}
		}
	}
	at := ev.GetCommitTime()
	if at == nil {
		at = ev.GetProduceTime()
	}
	out := make([]*apiv1.LogEntry, 0, len(texts))
	for _, t := range texts {
		out = append(out, &apiv1.LogEntry{Step: ev.GetStep(), CommandId: ev.GetCommandId(), Iteration: ev.GetIteration(), Attempt: ev.GetAttempt(),
			Tool: t.Tool, Stream: t.Stream, Text: t.Text, Truncated: t.Truncated, TotalBytes: t.Bytes, Time: at, Seq: ev.GetSeq()})
	}
	return out
}
