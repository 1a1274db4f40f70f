// Package server implements the orchestrator's gRPC API: catalog, start, cancel and
// credentials.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	sbv1 "github.com/noetl/noetl/gen/go/noetl/statebuilder/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/eventbus"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/natsx"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/orchestrator/internal/catalog"
	"github.com/noetl/noetl/services/orchestrator/internal/keystore"
	"github.com/noetl/noetl/services/orchestrator/internal/plugin"
)

// Server implements OrchestratorService, CredentialService and ApiKeyService.
type Server struct {
	orchv1.UnimplementedOrchestratorServiceServer
	orchv1.UnimplementedCredentialServiceServer
	orchv1.UnimplementedApiKeyServiceServer

	Catalog *catalog.Catalog
	// Keys stores credentials and API keys.
	Keys       *keystore.Store
	NC         *nats.Conn
	JS         jetstream.JetStream
	State      sbv1.StateServiceClient
	Partitions int
	// StartTimeout bounds how long StartExecution waits for playbook.started to commit.
	StartTimeout time.Duration
	// Waiters bounds concurrent WaitExecution calls; nil means 10,000.
	Waiters chan struct{}
	// Sealer encrypts credential data at rest; nil (no NOETL_ENCRYPTION_KEY) makes storing
	// and resolving credentials fail with FailedPrecondition.
	Sealer *Sealer
	// Registered, when set, is called after a playbook was registered (a tenant's override
	// of a system playbook gets its schedule there, package systembook).
	Registered func(ctx context.Context, e *catalog.Entry) error
	// Plugins, when set, checks the wasm steps of a playbook being registered against the
	// tenant's plug-ins.
	Plugins *plugin.Service
}

// MaxWorkloadBytes is the public limit on an execution's workload as JSON, which the
// gateway also holds a start request's own workload to (domain.MaxWorkloadBytes).
const MaxWorkloadBytes = domain.MaxWorkloadBytes

var idempotencyNS = uuid.MustParse("6f1c3f36-58b4-4c1e-9a43-6e6f65746c21")

func tenantOf(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// RegisterPlaybook validates and stores a playbook.
func (s *Server) RegisterPlaybook(ctx context.Context, req *orchv1.RegisterPlaybookRequest) (*orchv1.RegisterPlaybookResponse, error) {
	if len(req.GetContent()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "content: playbook YAML is required")
	}
	tenant := tenantOf(req.GetTenant())
	e, err := s.Catalog.Register(ctx, tenant, req.GetContent(), func(pb *playbook.Playbook, path string) error {
		if err := systemGuard(ctx, tenant, pb, path); err != nil || s.Plugins == nil {
			return err
		}
		return s.Plugins.CheckSteps(ctx, tenant, pb, path)
	})
	if err != nil {
		var pe *playbook.Error
		if errors.As(err, &pe) {
			return nil, status.Error(codes.InvalidArgument, "invalid playbook: "+err.Error())
		}
		return nil, err
	}
	if s.Registered != nil {
		if err := s.Registered(ctx, e); err != nil {
			return nil, status.Errorf(codes.Unavailable, "playbook %s version %d registered, but its schedule was not: %v; register it again", e.Path, e.Version, err)
		}
	}
	return &orchv1.RegisterPlaybookResponse{Entry: entryProto(e, true)}, nil
}

func entryProto(e *catalog.Entry, content bool) *orchv1.CatalogEntry {
	p := &orchv1.CatalogEntry{Tenant: e.Tenant, Path: e.Path, Version: e.Version, Name: e.Name, Description: e.Description, Warnings: e.Warnings, CreateTime: timestamppb.New(e.Created), ContentSha256: e.SHA256}
	if content {
		p.Content = e.Content
	}
	return p
}

// GetPlaybook returns a catalog entry.
func (s *Server) GetPlaybook(ctx context.Context, req *orchv1.GetPlaybookRequest) (*orchv1.GetPlaybookResponse, error) {
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	e, err := s.Catalog.Get(ctx, tenantOf(req.GetTenant()), req.GetPath(), req.GetVersion())
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q (version %d) not found", req.GetPath(), req.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.GetPlaybookResponse{Entry: entryProto(e, true)}, nil
}

// ListPlaybooks returns a page of the catalog.
func (s *Server) ListPlaybooks(ctx context.Context, req *orchv1.ListPlaybooksRequest) (*orchv1.ListPlaybooksResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	if n > 500 {
		n = 500
	}
	if req.GetPath() != "" {
		return s.listVersions(ctx, req, n)
	}
	es, err := s.Catalog.List(ctx, tenantOf(req.GetTenant()), n, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListPlaybooksResponse{}
	for _, e := range es {
		resp.Entries = append(resp.Entries, entryProto(e, false))
	}
	if len(es) == n {
		resp.NextPageToken = es[len(es)-1].Path
	}
	return resp, nil
}

// listVersions is ListPlaybooks for one path: its versions, newest first, n per page; the
// page token is the last version returned.
func (s *Server) listVersions(ctx context.Context, req *orchv1.ListPlaybooksRequest, n int) (*orchv1.ListPlaybooksResponse, error) {
	var before int64
	if t := req.GetPageToken(); t != "" {
		v, err := strconv.ParseInt(t, 10, 64)
		if err != nil || v <= 0 {
			return nil, status.Errorf(codes.InvalidArgument, "page_token: %q is not a token of this listing", t)
		}
		before = v
	}
	es, err := s.Catalog.Versions(ctx, tenantOf(req.GetTenant()), req.GetPath(), n, before)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q not found", req.GetPath())
	}
	if err != nil {
		return nil, err
	}
	resp := &orchv1.ListPlaybooksResponse{}
	for _, e := range es {
		resp.Entries = append(resp.Entries, entryProto(e, false))
	}
	if len(es) == n && es[len(es)-1].Version > 1 {
		resp.NextPageToken = strconv.FormatInt(es[len(es)-1].Version, 10)
	}
	return resp, nil
}

// StartExecution publishes playbook.started and waits until it is committed.
func (s *Server) StartExecution(ctx context.Context, req *orchv1.StartExecutionRequest) (*orchv1.StartExecutionResponse, error) {
	tenant := tenantOf(req.GetTenant())
	req.Path = playbook.CleanPath(req.GetPath())
	if req.GetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	if domain.PoolFor(req.GetPath()) == "system" && !auth.FromContext(ctx).Can(auth.PermSystem) {
		return nil, status.Errorf(codes.PermissionDenied, "path: starting system/ playbooks requires the system role")
	}
	cp, err := s.Catalog.Compiled(ctx, tenant, req.GetPath(), req.GetVersion())
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "playbook %q (version %d) not found", req.GetPath(), req.GetVersion())
	}
	if err != nil {
		return nil, err
	}
	var over map[string]any
	if len(req.GetWorkloadJson()) > 0 {
		if err := json.Unmarshal(req.GetWorkloadJson(), &over); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "workload: not a JSON object: %v", err)
		}
	}
	workload := domain.MergeWorkload(cp.Playbook.Workload, over)
	// Refused before anything is published, naming the public limit.
	if b, err := json.Marshal(workload); err == nil && len(b) > MaxWorkloadBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "workload: %d bytes (the playbook's workload merged with the request's, as JSON) exceeds the limit of %d bytes", len(b), MaxWorkloadBytes)
	}

	if err := domain.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	timeout := cp.Playbook.Timeout
	if t := req.GetTimeout(); t != nil {
		if timeout = t.AsDuration(); !t.IsValid() || timeout <= 0 || timeout > playbook.MaxExecutionTimeout {
			return nil, status.Errorf(codes.InvalidArgument, "timeout: must be positive and at most %s", playbook.MaxExecutionTimeout)
		}
	}
	payload, err := json.Marshal(domain.StartedPayload{Path: cp.Path, Version: cp.Version, Workload: workload, Labels: req.GetLabels(), TimeoutSeconds: timeout.Seconds()})
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "workload: %v", err)
	}
	id, existing, err := s.publishStart(ctx, tenant, req.GetIdempotencyKey(), req.GetParentExecutionId(), payload, func() error {
		// The message of the publish error names the internal subject: not for the caller.
		return status.Errorf(codes.ResourceExhausted, "workload: the start is too large to record; keep the workload under %d bytes of JSON", MaxWorkloadBytes)
	})
	if err != nil {
		return nil, err
	}
	return &orchv1.StartExecutionResponse{ExecutionId: id, Version: cp.Version, Existing: existing}, nil
}

// publishStart picks the id of a new execution (a UUIDv7, or with an idempotency key a
// UUIDv5 of tenant and key, so a retried start finds the same execution), publishes its
// playbook.started with payload and waits until it is committed. tooLarge is the error
// for a start larger than a message may be. existing reports that the idempotency key
// named an execution already logged (or already in the stream), which this call did not
// start.
func (s *Server) publishStart(ctx context.Context, tenant, idempotencyKey, parent string, payload []byte, tooLarge func() error) (id string, existing bool, err error) {
	if k := idempotencyKey; k != "" {
		id = uuid.NewSHA1(idempotencyNS, []byte(tenant+"\x00"+k)).String()
		// A start already logged answers at once. When the statebuilder cannot tell, the
		// start is published anyway: its playbook.started has the id of the first one, so
		// the materializer keeps one copy and notifies the commit either way. A start
		// needs only what it writes through (NATS, the materializer).
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second) // a paused statebuilder is one that cannot tell
		_, err := s.State.GetState(sctx, &sbv1.GetStateRequest{ExecutionId: id, Tenant: tenant})
		cancel()
		switch code := status.Code(err); {
		case err == nil:
			return id, true, nil
		case code == codes.NotFound, code == codes.Unavailable, code == codes.DeadlineExceeded:
		default:
			return "", false, err
		}
	} else {
		u, err := uuid.NewV7()
		if err != nil {
			return "", false, err
		}
		id = u.String()
	}
	ev := &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(id), domain.EventPlaybookStarted),
		ExecutionId:       id,
		Tenant:            tenant,
		Type:              domain.EventPlaybookStarted,
		ParentExecutionId: parent,
		PayloadJson:       payload,
		Producer:          "orchestrator",
		ProduceTime:       timestamppb.Now(),
	}
	// Subscribe before publishing so the commit notice cannot be missed.
	sub, err := s.NC.SubscribeSync(natsx.CommittedWildcard(id))
	if err != nil {
		return "", false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Make sure the server has the subscription before anything it must catch can happen.
	if err := s.NC.FlushTimeout(5 * time.Second); err != nil {
		return "", false, status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	duplicate, err := eventbus.PublishNew(ctx, s.JS, s.Partitions, ev)
	if err != nil {
		if errors.Is(err, natsx.ErrMessageTooLarge) {
			return "", false, tooLarge()
		}
		return "", false, status.Errorf(codes.Unavailable, "publish start: %v", err)
	}
	if duplicate {
		// The same start (same idempotency key) is already in the stream, durably: it is
		// committed, or will be, once; no notice follows a copy the stream dropped.
		return id, true, nil
	}
	timeout := s.StartTimeout
	if timeout <= 0 {
		timeout = 15 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := sub.NextMsgWithContext(wctx); err != nil {
		return "", false, status.Errorf(codes.Unavailable, "execution %s was published but its start was not committed within %s", id, timeout)
	}
	return id, false, nil
}

// CancelExecution publishes playbook.cancelled for a running execution.
func (s *Server) CancelExecution(ctx context.Context, req *orchv1.CancelExecutionRequest) (*orchv1.CancelExecutionResponse, error) {
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: tenantOf(req.GetTenant())})
	if err != nil {
		return nil, err
	}
	st := resp.GetState()
	if domain.IsTerminalStatus(st.GetStatus()) {
		return nil, status.Errorf(codes.FailedPrecondition, "execution %s is already %s", st.GetExecutionId(), st.GetStatus())
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by request"
	}
	payload, _ := json.Marshal(domain.TerminalPayload{Reason: reason})
	ev := &eventv1.Event{
		EventId:           domain.EventID(domain.ExecutionCause(st.GetExecutionId()), domain.EventPlaybookCancelled),
		ExecutionId:       st.GetExecutionId(),
		Tenant:            st.GetTenant(),
		ParentExecutionId: st.GetParentExecutionId(),
		Type:              domain.EventPlaybookCancelled,
		CauseEventId:      st.GetLastEventId(),
		PayloadJson:       payload,
		Error:             &eventv1.ErrorInfo{Code: "cancelled", Message: reason},
		Producer:          "orchestrator",
		ProduceTime:       timestamppb.Now(),
	}
	if err := eventbus.Publish(ctx, s.JS, s.Partitions, []*eventv1.Event{ev}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "publish cancel: %v", err)
	}
	s.cancelChildren(ctx, st.GetTenant(), st.GetExecutionId(), reason)
	return &orchv1.CancelExecutionResponse{}, nil
}

// WaitExecution waits for an execution's terminal commit notice. It subscribes before
// reading the state, so a terminal commit between the two cannot be missed.
func (s *Server) WaitExecution(ctx context.Context, req *orchv1.WaitExecutionRequest) (*orchv1.WaitExecutionResponse, error) {
	if req.GetExecutionId() == "" {
		return nil, status.Error(codes.InvalidArgument, "execution_id: required")
	}
	select {
	case s.Waiters <- struct{}{}:
		defer func() { <-s.Waiters }()
	default:
		return nil, status.Error(codes.ResourceExhausted, "too many concurrent waits; retry later")
	}
	timeout := req.GetTimeout().AsDuration()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timeout = min(timeout, 5*time.Minute)
	sub, err := s.NC.SubscribeSync(natsx.CommittedWildcard(req.GetExecutionId()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Make sure the server has the subscription before anything it must catch can happen.
	if err := s.NC.FlushTimeout(5 * time.Second); err != nil {
		return nil, status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	resp, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: tenantOf(req.GetTenant())})
	if err != nil {
		return nil, err
	}
	out := &orchv1.WaitExecutionResponse{Seq: resp.GetState().GetSeq(), Terminal: domain.IsTerminalStatus(resp.GetState().GetStatus())}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if out.Terminal {
		out.State = resp.GetState()
		return out, nil
	}
	for !out.Terminal {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			return out, nil // timed out (or the caller left): report what is known
		}
		if seq, terminal, err := noticeProgress(m.Data); err == nil {
			out.Seq = max(out.Seq, seq)
			out.Terminal = terminal
		}
	}
	final, err := s.State.GetState(ctx, &sbv1.GetStateRequest{ExecutionId: req.GetExecutionId(), Tenant: tenantOf(req.GetTenant()), MinSeq: out.Seq})
	if err != nil {
		return nil, err
	}
	out.State = final.GetState()
	return out, nil
}

// cancelChildren cancels the running child executions of a cancelled execution (their own
// cancellation cascades further). Children that already ended are left alone; failures are
// not fatal for the parent's cancellation.
func (s *Server) cancelChildren(ctx context.Context, tenant, parent, reason string) {
	token := ""
	for {
		resp, err := s.State.ListExecutions(ctx, &sbv1.ListExecutionsRequest{Tenant: tenant, ParentExecutionId: parent, Status: eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, PageSize: 500, PageToken: token})
		if err != nil {
			return
		}
		for _, c := range resp.GetExecutions() {
			_, _ = s.CancelExecution(ctx, &orchv1.CancelExecutionRequest{Tenant: tenant, ExecutionId: c.GetExecutionId(), Reason: "parent " + parent + " cancelled: " + reason})
		}
		if token = resp.GetNextPageToken(); token == "" {
			return
		}
	}
}

// systemGuard enforces the system pool's rules at registration: only the system role
// registers playbooks under system/, and only those may use system_* tool kinds, except
// that a tenant's override of a system playbook (<tenant>/system/<name> in its own
// catalog), which needs the admin role, may use playbook.TenantSafeToolKinds.
func systemGuard(ctx context.Context, tenant string, pb *playbook.Playbook, path string) error {
	system := domain.PoolFor(path) == "system"
	if system && !auth.FromContext(ctx).Can(auth.PermSystem) {
		return status.Errorf(codes.PermissionDenied, "metadata.path: registering system/ playbooks requires the system role")
	}
	if system {
		return nil
	}
	_, override := domain.OverrideName(tenant, path)
	allowed := func(kind string) bool {
		return !strings.HasPrefix(kind, "system_") || (override && slices.Contains(playbook.TenantSafeToolKinds, kind))
	}
	uses := false
	for _, st := range pb.Steps {
		for _, t := range st.Tool {
			if !allowed(t.Kind) {
				return status.Errorf(codes.InvalidArgument, "line %d: step %q: tool kind %q is reserved for system/ playbooks%s", st.Line, st.Name, t.Kind, tenantSafeHint(override))
			}
			uses = uses || strings.HasPrefix(t.Kind, "system_")
		}
	}
	for name, t := range pb.Workbook {
		if !allowed(t.Kind) {
			return status.Errorf(codes.InvalidArgument, "workbook task %q: tool kind %q is reserved for system/ playbooks%s", name, t.Kind, tenantSafeHint(override))
		}
		uses = uses || strings.HasPrefix(t.Kind, "system_")
	}
	if uses && !auth.FromContext(ctx).Can(auth.PermAdmin) {
		return status.Errorf(codes.PermissionDenied, "metadata.path: registering an override of a system playbook (%s) requires the admin role", path)
	}
	return nil
}

// tenantSafeHint names the system tools an override of a system playbook may use.
func tenantSafeHint(override bool) string {
	if !override {
		return ""
	}
	return " (an override of a system playbook may use " + strings.Join(playbook.TenantSafeToolKinds, ", ") + ")"
}
