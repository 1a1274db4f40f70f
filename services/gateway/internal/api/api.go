// Package api implements the public API on top of the internal services.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	rsv1 "github.com/noetl/noetl/gen/go/noetl/resultstore/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// Public size limits, checked before anything is forwarded; past one a request is refused
// with RESOURCE_EXHAUSTED (HTTP 413) naming the limit.
const (
	// MaxPlaybookBytes bounds a registered document.
	MaxPlaybookBytes = 1 << 20
	// MaxWorkloadBytes bounds a start's workload as JSON: the request's, checked here, and
	// the playbook's workload merged with it, which the orchestrator checks against the
	// same number (domain.MaxWorkloadBytes).
	MaxWorkloadBytes = domain.MaxWorkloadBytes
)

// tooLarge is the RESOURCE_EXHAUSTED error of a field of n bytes over its limit.
func tooLarge(reason, field string, n, limit int) error {
	return apierr.New(codes.ResourceExhausted, reason, fmt.Sprintf("%s: %d bytes exceeds the limit of %d bytes", field, n, limit),
		map[string]string{"field": field, "limit": fmt.Sprint(limit)})
}

// Server implements the public services.
type Server struct {
	apiv1.UnimplementedCatalogServiceServer
	apiv1.UnimplementedExecutionServiceServer
	apiv1.UnimplementedResultServiceServer
	apiv1.UnimplementedCredentialServiceServer
	apiv1.UnimplementedAdminServiceServer
	apiv1.UnimplementedScheduleServiceServer
	apiv1.UnimplementedTriggerServiceServer
	apiv1.UnimplementedSystemServiceServer
	apiv1.UnimplementedPluginServiceServer

	Orchestrator orchv1.OrchestratorServiceClient
	Credentials  orchv1.CredentialServiceClient
	State        sbv1.StateServiceClient
	Results      rsv1.ResultStoreServiceClient
	Keys         orchv1.ApiKeyServiceClient
	// Schedules stores the schedules (ScheduleService).
	Schedules orchv1.ScheduleServiceClient
	// Triggers stores and fires the triggers (TriggerService).
	Triggers orchv1.TriggerServiceClient
	// System lists the system playbooks and their overrides (SystemService).
	System orchv1.SystemServiceClient
	// Plugins stores the WebAssembly plug-ins (PluginService).
	Plugins orchv1.PluginServiceClient
	// Watch streams executions' committed events (WatchExecution).
	Watch orchv1.WatchServiceClient
	// Tickets signs Arrow Flight tickets (the internal secret's Trust).
	Tickets *auth.Trust
	// TicketTTL is how long a signed ticket is accepted.
	TicketTTL time.Duration
	// FlightLocation is the resultstore's Flight URI given to clients.
	FlightLocation string
	// Stopping, when closed, ends open watches (the gateway is shutting down).
	Stopping <-chan struct{}
}

// tenant is the tenant of the verified caller (invariant: reads and writes are scoped by
// identity, never by a tenant a request names). Without a principal it is empty, and the
// call fails: the forwarding credentials sign nothing for it.
func tenant(ctx context.Context) string {
	if p := auth.FromContext(ctx); p != nil {
		return p.Tenant
	}
	return ""
}

func playbookOf(e *orchv1.CatalogEntry) *apiv1.Playbook {
	return &apiv1.Playbook{Path: e.GetPath(), Version: e.GetVersion(), Name: e.GetName(), Description: e.GetDescription(), Content: e.GetContent(), Warnings: e.GetWarnings(), CreateTime: e.GetCreateTime()}
}

// RegisterPlaybook implements CatalogService.
func (s *Server) RegisterPlaybook(ctx context.Context, req *apiv1.RegisterPlaybookRequest) (*apiv1.RegisterPlaybookResponse, error) {
	if len(req.GetContent()) > MaxPlaybookBytes {
		return nil, tooLarge(apierr.ReasonContentTooLarge, "content", len(req.GetContent()), MaxPlaybookBytes)
	}
	resp, err := s.Orchestrator.RegisterPlaybook(ctx, &orchv1.RegisterPlaybookRequest{Tenant: tenant(ctx), Content: req.GetContent()})
	if err != nil {
		return nil, playbookError(err)
	}
	return &apiv1.RegisterPlaybookResponse{Playbook: playbookOf(resp.GetEntry())}, nil
}

// playbookError gives an InvalidArgument of the orchestrator's registration (a playbook that
// does not parse or validate; its message names the line, step and field) the details that
// say so: a BadRequest violation of the field "content" and the reason INVALID_PLAYBOOK.
// Details the orchestrator set pass unchanged.
func playbookError(err error) error {
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || len(st.Details()) > 0 {
		return err
	}
	desc := strings.TrimPrefix(st.Message(), "invalid playbook: ")
	desc = strings.TrimPrefix(desc, "content: ")
	return apierr.FieldViolation(apierr.ReasonInvalidPlaybook, "content", desc, st.Message())
}

// GetPlaybook implements CatalogService.
func (s *Server) GetPlaybook(ctx context.Context, req *apiv1.GetPlaybookRequest) (*apiv1.GetPlaybookResponse, error) {
	req.Path = playbook.CleanPath(req.GetPath()) // NoETL writes /team/job for team/job

	if err := validPlaybookPath("path", req.GetPath()); err != nil {
		return nil, err
	}
	resp, err := s.Orchestrator.GetPlaybook(ctx, &orchv1.GetPlaybookRequest{Tenant: tenant(ctx), Path: req.GetPath(), Version: req.GetVersion()})
	if err != nil {
		return nil, err
	}
	return &apiv1.GetPlaybookResponse{Playbook: playbookOf(resp.GetEntry())}, nil
}

// ListPlaybooks implements CatalogService.
func (s *Server) ListPlaybooks(ctx context.Context, req *apiv1.ListPlaybooksRequest) (*apiv1.ListPlaybooksResponse, error) {
	req.Path = playbook.CleanPath(req.GetPath()) // NoETL writes /team/job for team/job

	if req.GetPath() != "" {
		if err := validPlaybookPath("path", req.GetPath()); err != nil {
			return nil, err
		}
	}
	resp, err := s.Orchestrator.ListPlaybooks(ctx, &orchv1.ListPlaybooksRequest{Tenant: tenant(ctx), PageSize: req.GetPageSize(), PageToken: req.GetPageToken(), Path: req.GetPath()})
	if err != nil {
		return nil, err
	}
	out := &apiv1.ListPlaybooksResponse{NextPageToken: resp.GetNextPageToken()}
	for _, e := range resp.GetEntries() {
		out.Playbooks = append(out.Playbooks, playbookOf(e))
	}
	return out, nil
}

// StartExecution implements ExecutionService.
func (s *Server) StartExecution(ctx context.Context, req *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error) {
	req.Path = playbook.CleanPath(req.GetPath()) // NoETL writes /team/job for team/job

	if err := validPlaybookPath("path", req.GetPath()); err != nil {
		return nil, err
	}
	var w []byte
	if req.GetWorkload() != nil {
		// Encoded as the orchestrator encodes the merged workload, so that both measure the
		// same bytes against MaxWorkloadBytes.
		b, err := json.Marshal(req.GetWorkload().AsMap())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "workload: not representable as JSON (a NaN or infinite number)")
		}
		if len(b) > MaxWorkloadBytes {
			return nil, tooLarge(apierr.ReasonWorkloadTooLarge, "workload", len(b), MaxWorkloadBytes)
		}
		w = b
	}
	if err := domain.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	// A wait answers with the view WaitExecution gives a reader: every role that may start
	// may read (authz's TestEveryRoleThatStartsMayRead holds it so).
	if err := domain.CheckDuration("wait", req.GetWait()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.Orchestrator.StartExecution(ctx, &orchv1.StartExecutionRequest{Tenant: tenant(ctx), Path: req.GetPath(), Version: req.GetVersion(), WorkloadJson: w, IdempotencyKey: req.GetIdempotencyKey(), Labels: req.GetLabels(), Timeout: req.GetTimeout(), Wait: req.GetWait()})
	if err != nil {
		return nil, startError(err)
	}
	out := &apiv1.StartExecutionResponse{ExecutionId: resp.GetExecutionId(), Version: resp.GetVersion(), Existing: resp.GetExisting()}
	if st := resp.GetState(); st != nil {
		out.Execution = executionView(st) // read for the caller's tenant, as WaitExecution's
	}
	return out, nil
}

// startError gives the orchestrator's refusal of a merged workload over the limit (a
// RESOURCE_EXHAUSTED "workload: ...") the details of the gateway's own refusal: reason
// WORKLOAD_TOO_LARGE and the limit.
func startError(err error) error {
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || len(st.Details()) > 0 || !strings.HasPrefix(st.Message(), "workload: ") {
		return err
	}
	return apierr.New(codes.ResourceExhausted, apierr.ReasonWorkloadTooLarge, st.Message(), map[string]string{"field": "workload", "limit": fmt.Sprint(MaxWorkloadBytes)})
}

// jsonValue is the JSON text b as a Value (numbers as doubles), or b as a string Value
// when it is not JSON; nil when b is empty. encoding/json decodes it and structpb converts
// the result, the same Value protojson makes, about four times faster: a 1,000-wide loop's
// list of results, which a start that waits returns, took 87 µs instead of 402.
func jsonValue(b []byte) *structpb.Value {
	if len(b) == 0 {
		return nil
	}
	var x any
	if err := json.Unmarshal(b, &x); err == nil {
		if v, err := structpb.NewValue(x); err == nil {
			return v
		}
	}
	return structpb.NewStringValue(string(b))
}

// GetExecution implements ExecutionService.
func (s *Server) GetExecution(ctx context.Context, req *apiv1.GetExecutionRequest) (*apiv1.GetExecutionResponse, error) {
	x, err := s.execution(ctx, req.GetExecutionId(), 0)
	if err != nil {
		return nil, err
	}
	return &apiv1.GetExecutionResponse{Execution: x}, nil
}

// WaitExecution implements ExecutionService.
func (s *Server) WaitExecution(ctx context.Context, req *apiv1.WaitExecutionRequest) (*apiv1.WaitExecutionResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if err := domain.CheckDuration("timeout", req.GetTimeout()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	w, err := s.Orchestrator.WaitExecution(ctx, &orchv1.WaitExecutionRequest{Tenant: tenant(ctx), ExecutionId: req.GetExecutionId(), Timeout: req.GetTimeout()})
	if err != nil {
		return nil, err
	}
	if st := w.GetState(); st != nil {
		// The orchestrator read the final state for the caller's tenant: no second read.
		return &apiv1.WaitExecutionResponse{Execution: executionView(st)}, nil
	}
	x, err := s.execution(ctx, req.GetExecutionId(), w.GetSeq())
	if err != nil {
		return nil, err
	}
	return &apiv1.WaitExecutionResponse{Execution: x}, nil
}

// execution reads an execution's view at or after minSeq.
func (s *Server) execution(ctx context.Context, id string, minSeq int64) (*apiv1.Execution, error) {
	if err := validExecutionID("execution_id", id); err != nil {
		return nil, err
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: id, Tenant: tenant(ctx), MinSeq: minSeq})
	if err != nil {
		return nil, err
	}
	return executionView(resp.GetState()), nil
}

// executionView is the public view of an execution's state.
func executionView(st *sbv1.ExecutionState) *apiv1.Execution {
	x := &apiv1.Execution{
		ExecutionId: st.GetExecutionId(), Path: st.GetPlaybookPath(), Version: st.GetPlaybookVersion(), Status: st.GetStatus(),
		Result: jsonValue(st.GetResultJson()), Error: st.GetError(), FailedSteps: st.GetFailedSteps(), LastSeq: st.GetSeq(),
		StartTime: st.GetStartTime(), EndTime: st.GetEndTime(), ParentExecutionId: st.GetParentExecutionId(), Steps: map[string]*apiv1.StepView{},
		Labels: st.GetLabels(), RerunOf: st.GetRerunOf(), FromStep: st.GetFromStep(), Tenant: st.GetTenant(),
	}
	for name, s := range st.GetSteps() {
		x.Steps[name] = &apiv1.StepView{Name: name, Status: s.GetStatus(), Result: jsonValue(s.GetResultJson()), ResultRef: s.GetResultRef(), Error: s.GetError(), Epoch: s.GetEpoch(), Reused: s.GetReused()}
	}
	return x
}

// ListExecutions implements ExecutionService.
func (s *Server) ListExecutions(ctx context.Context, req *apiv1.ListExecutionsRequest) (*apiv1.ListExecutionsResponse, error) {
	req.Path = playbook.CleanPath(req.GetPath()) // NoETL writes /team/job for team/job

	if req.GetPath() != "" {
		if err := validPlaybookPath("path", req.GetPath()); err != nil {
			return nil, err
		}
	}
	for _, f := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"start_time_after", req.GetStartTimeAfter()}, {"start_time_before", req.GetStartTimeBefore()}} {
		if f.ts != nil && f.ts.CheckValid() != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: not a valid time", f.name)
		}
	}
	if err := domain.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	scope, lctx, err := listScope(ctx, req.GetTenant())
	if err != nil {
		return nil, err
	}
	resp, err := s.State.ListExecutions(lctx, &sbv1.ListExecutionsRequest{Tenant: scope, PageSize: req.GetPageSize(), PageToken: req.GetPageToken(), Status: req.GetStatus(), PlaybookPath: req.GetPath(),
		StartedAfter: req.GetStartTimeAfter(), StartedBefore: req.GetStartTimeBefore(), Labels: req.GetLabels()})
	if err != nil {
		return nil, err
	}
	out := &apiv1.ListExecutionsResponse{NextPageToken: resp.GetNextPageToken()}
	for _, e := range resp.GetExecutions() {
		out.Executions = append(out.Executions, &apiv1.Execution{ExecutionId: e.GetExecutionId(), Path: e.GetPlaybookPath(), Version: e.GetPlaybookVersion(), Status: e.GetStatus(), LastSeq: e.GetLastSeq(), StartTime: e.GetStartTime(), EndTime: e.GetEndTime(), ParentExecutionId: e.GetParentExecutionId(), Labels: e.GetLabels(), Tenant: e.GetTenant()})
	}
	return out, nil
}

// AllTenants is the tenant of ListExecutionsRequest that lists every tenant's executions
// (AIP-159's wildcard).
const AllTenants = "-"

// listScope decides whose executions a list shows: the caller's tenant when the request
// names none or its own; another tenant, or every tenant (AllTenants), only for a caller
// with the system permission, and then the statebuilder is asked as the gateway (a user
// principal's calls are scoped to its own tenant there). It returns the statebuilder's
// tenant filter (empty for every tenant) and the context to call it with.
func listScope(ctx context.Context, want string) (string, context.Context, error) {
	own := tenant(ctx)
	if want == "" || want == own {
		return own, ctx, nil
	}
	if want != AllTenants {
		if err := auth.CheckTenant("tenant", want); err != nil {
			return "", nil, err
		}
	}
	p := auth.FromContext(ctx)
	if p == nil || !p.Can(auth.PermSystem) {
		return "", nil, status.Errorf(codes.PermissionDenied, "tenant: listing the executions of another tenant (%s) needs the system role; the caller's tenant is %s", want, own)
	}
	if want == AllTenants {
		want = ""
	}
	return want, auth.ServiceCall(auth.NewContext(ctx, nil)), nil
}

// RerunExecution implements ExecutionService.
func (s *Server) RerunExecution(ctx context.Context, req *apiv1.RerunExecutionRequest) (*apiv1.RerunExecutionResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if f := req.GetFromStep(); len(f) > 256 || strings.ContainsRune(f, 0) {
		return nil, invalid("from_step", "must be a step name")
	}
	resp, err := s.Orchestrator.RerunExecution(ctx, &orchv1.RerunExecutionRequest{Tenant: tenant(ctx), ExecutionId: req.GetExecutionId(), FromStep: req.GetFromStep(), IdempotencyKey: req.GetIdempotencyKey()})
	if err != nil {
		return nil, err
	}
	return &apiv1.RerunExecutionResponse{ExecutionId: resp.GetExecutionId(), Version: resp.GetVersion(), ReusedSteps: resp.GetReusedSteps()}, nil
}

// CancelExecution implements ExecutionService.
func (s *Server) CancelExecution(ctx context.Context, req *apiv1.CancelExecutionRequest) (*apiv1.CancelExecutionResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	if _, err := s.Orchestrator.CancelExecution(ctx, &orchv1.CancelExecutionRequest{Tenant: tenant(ctx), ExecutionId: req.GetExecutionId(), Reason: req.GetReason()}); err != nil {
		return nil, err
	}
	return &apiv1.CancelExecutionResponse{}, nil
}

// ListExecutionEvents implements ExecutionService.
func (s *Server) ListExecutionEvents(ctx context.Context, req *apiv1.ListExecutionEventsRequest) (*apiv1.ListExecutionEventsResponse, error) {
	if err := validExecutionID("execution_id", req.GetExecutionId()); err != nil {
		return nil, err
	}
	var after int64
	if t := req.GetPageToken(); t != "" {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n < 0 {
			return nil, status.Error(codes.InvalidArgument, "page_token: malformed")
		}
		after = n
	}
	resp, err := s.State.ListEvents(ctx, &sbv1.ListEventsRequest{ExecutionId: req.GetExecutionId(), AfterSeq: after, PageSize: req.GetPageSize(), Tenant: tenant(ctx)})
	if err != nil {
		return nil, err
	}
	out := &apiv1.ListExecutionEventsResponse{}
	if resp.GetNextAfterSeq() > 0 {
		out.NextPageToken = strconv.FormatInt(resp.GetNextAfterSeq(), 10)
	}
	for _, ev := range resp.GetEvents() {
		out.Events = append(out.Events, eventOf(ev))
	}
	return out, nil
}

func eventOf(ev *eventv1.Event) *apiv1.Event {
	payload := jsonValue(ev.GetPayloadJson())
	if ev.GetType() == domain.EventCommandsIssued {
		payload = issuedPayload(ev)
	}
	return &apiv1.Event{Seq: ev.GetSeq(), EventId: ev.GetEventId(), Type: ev.GetType(), Step: ev.GetStep(), CommandId: ev.GetCommandId(), Attempt: ev.GetAttempt(), Iteration: ev.GetIteration(),
		Payload: payload, Result: jsonValue(ev.GetResultJson()), ResultRef: ev.GetResultRef(), Error: ev.GetError(), Producer: ev.GetProducer(), ProduceTime: ev.GetProduceTime(), CommitTime: ev.GetCommitTime(), StartTime: ev.GetStartTime()}
}

// issuedPayload is the payload the API shows of a commands.issued: the commands it issued,
// {"commands": [{"commandId", "attempt", "iteration": {"epoch", "index"}}, ...]} in order,
// named as a command.issued's fields are (what they run is the workers').
func issuedPayload(ev *eventv1.Event) *structpb.Value {
	list := make([]*structpb.Value, len(ev.GetCommands()))
	for i, c := range ev.GetCommands() {
		list[i] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"commandId": structpb.NewStringValue(c.GetCommandId()),
			"attempt":   structpb.NewNumberValue(float64(c.GetAttempt())),
			"iteration": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"epoch": structpb.NewNumberValue(float64(c.GetIteration().GetEpoch())),
				"index": structpb.NewNumberValue(float64(c.GetIteration().GetIndex())),
			}}),
		}})
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"commands": structpb.NewListValue(&structpb.ListValue{Values: list})}})
}

// resultID is the result id of a request: a bare id or a URL-encoded URI, checked once
// decoded (validResultID).
func resultID(raw string) (string, error) {
	id := raw
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	if err := validResultID("result_id", id); err != nil {
		return "", err
	}
	return id, nil
}

// GetResult implements ResultService: the result as JSON, or the part a JSON pointer
// selects, or a page of a table; at most 8 MiB (larger: a pointer, or Flight).
func (s *Server) GetResult(ctx context.Context, req *apiv1.GetResultRequest) (*apiv1.GetResultResponse, error) {
	id, err := resultID(req.GetResultId())
	if err != nil {
		return nil, err
	}
	if req.GetOffset() < 0 {
		return nil, status.Error(codes.InvalidArgument, "offset: must not be negative")
	}
	if req.GetLimit() < 0 {
		return nil, status.Error(codes.InvalidArgument, "limit: must not be negative")
	}
	r, err := s.Results.ReadResult(ctx, &rsv1.ReadResultRequest{Tenant: tenant(ctx), Uri: id, Pointer: req.GetPointer(), Offset: req.GetOffset(), Limit: req.GetLimit()})
	if err != nil {
		return nil, err
	}
	return &apiv1.GetResultResponse{Ref: r.GetRef(), Value: jsonValue(r.GetJson()), TotalRows: r.GetTotalRows()}, nil
}

// GetResultFlightInfo implements ResultService: the resultstore's Flight location and a
// ticket for the result, signed here for the caller's tenant and valid for TicketTTL.
func (s *Server) GetResultFlightInfo(ctx context.Context, req *apiv1.GetResultFlightInfoRequest) (*apiv1.GetResultFlightInfoResponse, error) {
	id, err := resultID(req.GetResultId())
	if err != nil {
		return nil, err
	}
	d, err := s.Results.DescribeResult(ctx, &rsv1.DescribeResultRequest{Tenant: tenant(ctx), Uri: id})
	if err != nil {
		return nil, err
	}
	rid := d.GetRef().GetUri()
	rid = rid[strings.LastIndex(rid, "/")+1:]
	ticket, exp := s.Tickets.SignTicket(tenant(ctx), rid, s.TicketTTL)
	return &apiv1.GetResultFlightInfoResponse{Ref: d.GetRef(), Location: s.FlightLocation, Ticket: ticket, ExpireTime: timestamppb.New(exp)}, nil
}
