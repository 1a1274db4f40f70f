// Package compat serves the REST routes NoETL clients call (`/api/catalog/register`,
// `/api/execute`, `/api/executions/{id}`, ...) with NoETL's JSON shapes, on top of the public
// API (the gateway passes a client of its own gRPC server, so these routes are authenticated
// and authorized like every other call). Ids and versions are strings on the wire, as in
// NoETL.
package compat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	eventv1 "github.com/noetl/noetl/gen/go/noetl/event/v1"
	"github.com/noetl/noetl/internal/playbook"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
)

// Backend is the part of the public API the routes call; the gateway's api.Server.
type Backend interface {
	RegisterPlaybook(context.Context, *apiv1.RegisterPlaybookRequest) (*apiv1.RegisterPlaybookResponse, error)
	StartExecution(context.Context, *apiv1.StartExecutionRequest) (*apiv1.StartExecutionResponse, error)
	GetExecution(context.Context, *apiv1.GetExecutionRequest) (*apiv1.GetExecutionResponse, error)
	WaitExecution(context.Context, *apiv1.WaitExecutionRequest) (*apiv1.WaitExecutionResponse, error)
	CancelExecution(context.Context, *apiv1.CancelExecutionRequest) (*apiv1.CancelExecutionResponse, error)
	ListExecutionEvents(context.Context, *apiv1.ListExecutionEventsRequest) (*apiv1.ListExecutionEventsResponse, error)
	PutCredential(context.Context, *apiv1.PutCredentialRequest) (*apiv1.PutCredentialResponse, error)
	GetPlaybook(context.Context, *apiv1.GetPlaybookRequest) (*apiv1.GetPlaybookResponse, error)
	ListPlaybooks(context.Context, *apiv1.ListPlaybooksRequest) (*apiv1.ListPlaybooksResponse, error)
	ListExecutions(context.Context, *apiv1.ListExecutionsRequest) (*apiv1.ListExecutionsResponse, error)
	GetResult(context.Context, *apiv1.GetResultRequest) (*apiv1.GetResultResponse, error)
	ListExecutionVariables(context.Context, *apiv1.ListExecutionVariablesRequest) (*apiv1.ListExecutionVariablesResponse, error)
	SetExecutionVariables(context.Context, *apiv1.SetExecutionVariablesRequest) (*apiv1.SetExecutionVariablesResponse, error)
	DeleteExecutionVariables(context.Context, *apiv1.DeleteExecutionVariablesRequest) (*apiv1.DeleteExecutionVariablesResponse, error)
}

// MaxEvents is how many events GET /api/executions/{id} returns (the first ones, in seq
// order); the rest are paged over /v1/executions/{id}/events.
const MaxEvents = 1000

// cancelWait bounds how long a cancel request waits to report the terminal status.
const cancelWait = 10 * time.Second

type handler struct {
	b   Backend
	log *slog.Logger
}

// New returns the handler of the /api/ routes. Request bodies are expected to be bounded by
// the caller (http.MaxBytesReader).
func New(b Backend, log *slog.Logger) http.Handler {
	h := &handler{b: b, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/catalog/register", h.register)
	mux.HandleFunc("POST /api/catalog/list", h.catalogList)
	mux.HandleFunc("POST /api/catalog/resource", h.catalogResource)
	mux.HandleFunc("POST /api/execute", h.execute)
	mux.HandleFunc("POST /api/execute/batch", h.executeBatch)
	mux.HandleFunc("GET /api/executions", h.listExecutions)
	mux.HandleFunc("GET /api/result/resolve", h.resolveResult)
	mux.HandleFunc("GET /api/vars/{execution_id}", h.listVars)
	mux.HandleFunc("GET /api/vars/{execution_id}/{name}", h.getVar)
	mux.HandleFunc("POST /api/vars/{execution_id}", h.setVars)
	mux.HandleFunc("POST /api/vars/{execution_id}/{name}", h.setVars)
	mux.HandleFunc("DELETE /api/vars/{execution_id}", h.deleteVars)
	mux.HandleFunc("DELETE /api/vars/{execution_id}/{name}", h.deleteVars)
	mux.HandleFunc("GET /api/executions/{id}", h.execution)
	mux.HandleFunc("GET /api/executions/{id}/status", h.status)
	mux.HandleFunc("POST /api/executions/{id}/cancel", h.cancel)
	mux.HandleFunc("POST /api/credentials", h.credential)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path), Code: "NOT_FOUND"})
	})
	return mux
}

// errorBody is the body of every error response.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// httpStatus maps a gRPC code to the HTTP status of the response; false means the error is
// unexpected and its message is masked.
func httpStatus(c codes.Code) (int, bool) {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest, true
	case codes.NotFound:
		return http.StatusNotFound, true
	case codes.FailedPrecondition:
		return http.StatusConflict, true
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, true
	case codes.Unauthenticated:
		return http.StatusUnauthorized, true
	case codes.PermissionDenied:
		return http.StatusForbidden, true
	}
	return http.StatusInternalServerError, false
}

// codeName spells a gRPC code as in google.rpc.Code: "InvalidArgument" -> "INVALID_ARGUMENT".
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// writeError answers with the error's mapped status; unexpected errors are logged and
// answered with a masked message.
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("body: exceeds the limit of %d bytes", tooLarge.Limit), Code: codeName(codes.InvalidArgument)})
		return
	}
	st := status.Convert(err)
	code, known := httpStatus(st.Code())
	if st.Code() == codes.ResourceExhausted && apierr.TooLarge(apierr.Reason(st)) {
		code = http.StatusRequestEntityTooLarge // refused for its size: a retry will not help
	}
	if d, ok := apierr.RetryAfter(st); ok {
		w.Header().Set("Retry-After", apierr.RetryAfterSeconds(d))
	}
	if id := apierr.CorrelationID(st); id != "" {
		// Masked at the gRPC edge, which logged the original: the message names only the id.
		writeJSON(w, code, errorBody{Error: st.Message(), Code: codeName(codes.Internal)})
		return
	}
	if !known {
		if h.log != nil {
			h.log.Error("compat request failed", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("code", st.Code().String()), slog.String("error", st.Message()))
		}
		writeJSON(w, code, errorBody{Error: "internal error", Code: codeName(codes.Internal)})
		return
	}
	writeJSON(w, code, errorBody{Error: st.Message(), Code: codeName(st.Code())})
}

// decode reads a JSON body into v. An empty body is an error unless optional. Its errors
// never quote the body (it may hold secrets).
func decode(r *http.Request, v any, optional bool) error {
	err := json.NewDecoder(r.Body).Decode(v)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		if optional {
			return nil
		}
		return status.Error(codes.InvalidArgument, "body: a JSON object is required")
	case errors.As(err, &tooLarge):
		return err
	case errors.As(err, &syn):
		return status.Errorf(codes.InvalidArgument, "body: invalid JSON at offset %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return status.Error(codes.InvalidArgument, "body: a JSON object is required")
		}
		return status.Errorf(codes.InvalidArgument, "%s: must be %s", typ.Field, jsonKind(typ.Type.Kind().String()))
	}
	return status.Error(codes.InvalidArgument, "body: invalid JSON")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "map", "struct":
		return "an object"
	case "slice":
		return "a list"
	}
	return "a " + goKind
}

// playbookContent returns content as YAML: NoETL clients send it base64-encoded, others as
// text. Content that is valid base64 of UTF-8 text naming an apiVersion is decoded.
func playbookContent(content string) string {
	if content == "" || strings.Contains(content, ":") {
		return content // YAML text: a playbook has "key: value" lines
	}
	t := strings.Map(func(r rune) rune { // base64 may come wrapped in lines
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, content)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(t); err == nil && utf8.Valid(b) && bytes.Contains(b, []byte("apiVersion")) {
			return string(b)
		}
	}
	return content
}

func catalogID(path string, version int64) string {
	return path + "@" + strconv.FormatInt(version, 10)
}

// register handles POST /api/catalog/register {content, resource_type?}.
func (h *handler) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Content string `json:"content"`
	}
	if err := decode(r, &req, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.b.RegisterPlaybook(r.Context(), &apiv1.RegisterPlaybookRequest{Content: playbookContent(req.Content)})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	p := resp.GetPlaybook()
	writeJSON(w, http.StatusOK, struct {
		Status    string   `json:"status"`
		Message   string   `json:"message"`
		Path      string   `json:"path"`
		Version   string   `json:"version"`
		CatalogID string   `json:"catalog_id"`
		Kind      string   `json:"kind"`
		Warnings  []string `json:"warnings,omitempty"`
	}{
		Status: "success", Message: fmt.Sprintf("playbook %s registered as version %d", p.GetPath(), p.GetVersion()),
		Path: p.GetPath(), Version: strconv.FormatInt(p.GetVersion(), 10), CatalogID: catalogID(p.GetPath(), p.GetVersion()),
		Kind: "Playbook", Warnings: p.GetWarnings(),
	})
}

// parseVersion reads a version given as a number, a string of digits, "latest" or
// nothing (zero: the latest).
func parseVersion(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
	}
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "latest") {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, status.Error(codes.InvalidArgument, `version: must be a positive number or "latest"`)
	}
	return n, nil
}

// parseCatalogID splits "path@version" (as returned by register); anything else is a path.
func parseCatalogID(raw json.RawMessage) (string, int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", 0, nil
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		id = string(raw) // a NoETL numeric id: looked up as a path, and not found
	}
	path, v, ok := strings.Cut(id, "@")
	if !ok {
		return id, 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return "", 0, status.Error(codes.InvalidArgument, "catalog_id: want <path>@<version>")
	}
	return path, n, nil
}

// execute handles POST /api/execute {path | catalog_id, version?, payload | args |
// parameters | workload, labels? | metadata?, idempotency_key? | dedup.key?}. labels (an
// object of strings) is this engine's addition: NoETL's request has no field for them;
// metadata, an object of strings too, is taken as labels as well (labels win a key both
// give), for clients that tag their starts that way.
func (h *handler) execute(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := decode(r, &raw, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	req, err := parseStart(raw, "")
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	resp, err := h.b.StartExecution(r.Context(), req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, startedOf(req.GetPath(), resp))
}

// started is the answer to a start.
type started struct {
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
	Path        string `json:"path"`
	Version     string `json:"version"`
	CatalogID   string `json:"catalog_id"`
}

func startedOf(path string, resp *apiv1.StartExecutionResponse) started {
	return started{resp.GetExecutionId(), "RUNNING", path, strconv.FormatInt(resp.GetVersion(), 10), catalogID(path, resp.GetVersion())}
}

// parseStart reads one NoETL execute request (a JSON object) into a start; its errors name
// the field, after prefix (for example "executions[3].").
func parseStart(raw json.RawMessage, prefix string) (*apiv1.StartExecutionRequest, error) {
	var req struct {
		Labels         json.RawMessage `json:"labels"`
		Metadata       json.RawMessage `json:"metadata"`
		Path           string          `json:"path"`
		CatalogID      json.RawMessage `json:"catalog_id"`
		Version        json.RawMessage `json:"version"`
		Payload        json.RawMessage `json:"payload"`
		Args           json.RawMessage `json:"args"`
		Parameters     json.RawMessage `json:"parameters"`
		Workload       json.RawMessage `json:"workload"`
		IdempotencyKey string          `json:"idempotency_key"`
		Dedup          *struct {
			Key string `json:"key"`
		} `json:"dedup"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) && typ.Field != "" {
			return nil, status.Errorf(codes.InvalidArgument, "%s%s: must be %s", prefix, typ.Field, jsonKind(typ.Type.Kind().String()))
		}
		return nil, status.Errorf(codes.InvalidArgument, "%s: must be a JSON object", bodyName(prefix))
	}
	named := func(err error) error {
		if prefix == "" || err == nil {
			return err
		}
		st := status.Convert(err)
		return status.Error(st.Code(), prefix+st.Message())
	}
	path, version, err := parseCatalogID(req.CatalogID)
	if err != nil {
		return nil, named(err)
	}
	if req.Path != "" {
		path = req.Path
	}
	path = playbook.CleanPath(path) // NoETL writes /team/job for team/job
	if path == "" {
		return nil, named(status.Error(codes.InvalidArgument, "path: path or catalog_id is required"))
	}
	if v, err := parseVersion(req.Version); err != nil {
		return nil, named(err)
	} else if v > 0 {
		version = v
	}
	var workload *structpb.Struct
	var given []string
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"payload", req.Payload}, {"args", req.Args}, {"parameters", req.Parameters}, {"workload", req.Workload}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		given = append(given, f.name)
		workload = &structpb.Struct{}
		if err := protojson.Unmarshal(f.raw, workload); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s%s: must be a JSON object", prefix, f.name)
		}
	}
	if len(given) > 1 {
		return nil, status.Errorf(codes.InvalidArgument, "%s%s: give only one of payload, args, parameters and workload", prefix, given[1])
	}
	var labels map[string]string
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"metadata", req.Metadata}, {"labels", req.Labels}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		var m map[string]string
		if err := json.Unmarshal(f.raw, &m); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s%s: must be a JSON object of strings", prefix, f.name)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, m)
	}
	key := req.IdempotencyKey
	if req.Dedup != nil && req.Dedup.Key != "" {
		if key != "" && key != req.Dedup.Key {
			return nil, status.Errorf(codes.InvalidArgument, "%sdedup.key: differs from idempotency_key", prefix)
		}
		key = req.Dedup.Key
	}
	if len(key) > MaxIdempotencyKey {
		return nil, status.Errorf(codes.InvalidArgument, "%sidempotency_key: %d characters exceeds the limit of %d", prefix, len(key), MaxIdempotencyKey)
	}
	return &apiv1.StartExecutionRequest{Path: path, Version: version, Workload: workload, Labels: labels, IdempotencyKey: key}, nil
}

// MaxIdempotencyKey bounds an execute request's idempotency_key (or dedup.key).
const MaxIdempotencyKey = 256

// bodyName is what an error about the whole request calls it: "body", or the batch item.
func bodyName(prefix string) string {
	if prefix == "" {
		return "body"
	}
	return strings.TrimSuffix(prefix, ".")
}

// statusName spells an execution status as NoETL does: RUNNING, COMPLETED, FAILED,
// CANCELLED (PENDING before the start is folded).
func statusName(s eventv1.ExecutionStatus) string {
	switch s {
	case eventv1.ExecutionStatus_EXECUTION_STATUS_RUNNING:
		return "RUNNING"
	case eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED:
		return "COMPLETED"
	case eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED:
		return "FAILED"
	case eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return "CANCELLED"
	}
	return "PENDING"
}

func terminal(s eventv1.ExecutionStatus) bool {
	return s == eventv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED || s == eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED || s == eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED
}

// eventStatus is the NoETL status string of an event type.
func eventStatus(ev *apiv1.Event) string {
	switch ev.GetType() {
	case "playbook.started":
		return "STARTED"
	case "step.enter":
		return "ENTERED"
	case "command.issued", "commands.issued":
		return "ISSUED"
	case "command.started", "command.heartbeat", "timer.fired":
		return "RUNNING"
	case "step.skipped":
		return "SKIPPED"
	case "ctx.updated":
		return "CONTEXT"
	case "timer.scheduled":
		return "PENDING"
	case "playbook.cancelled":
		return "CANCELLED"
	case "call.error", "command.failed", "playbook.failed":
		return "FAILED"
	}
	if ev.GetError() != nil {
		return "FAILED"
	}
	return "COMPLETED" // call.done, command.completed, step.exit, playbook.completed
}

func timeText(t *timestamppb.Timestamp) *string {
	if t == nil {
		return nil
	}
	s := t.AsTime().UTC().Format(time.RFC3339Nano)
	return &s
}

// jsonOf renders a protobuf message (a JSON value, a result reference) as JSON; nil is null.
func jsonOf(m proto.Message) json.RawMessage {
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil
	}
	return b
}

func errorText(e *eventv1.ErrorInfo) *string {
	if e == nil {
		return nil
	}
	s := e.GetMessage()
	return &s
}

// eventJSON is one event in NoETL's shape.
type eventJSON struct {
	EventID   string          `json:"event_id"`
	Seq       int64           `json:"seq"`
	EventType string          `json:"event_type"`
	NodeName  string          `json:"node_name"`
	Status    string          `json:"status"`
	Timestamp *string         `json:"timestamp"`
	Result    json.RawMessage `json:"result"`
	ResultRef json.RawMessage `json:"result_ref,omitempty"`
	Error     *string         `json:"error,omitempty"`
}

// execution handles GET /api/executions/{id}: the execution with its first MaxEvents events.
func (h *handler) execution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	x, err := h.b.GetExecution(r.Context(), &apiv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	evs, err := h.b.ListExecutionEvents(r.Context(), &apiv1.ListExecutionEventsRequest{ExecutionId: id, PageSize: MaxEvents})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	e := x.GetExecution()
	events := make([]eventJSON, 0, len(evs.GetEvents()))
	for _, ev := range evs.GetEvents() {
		ts := ev.GetCommitTime()
		if ts == nil {
			ts = ev.GetProduceTime()
		}
		events = append(events, eventJSON{
			EventID: ev.GetEventId(), Seq: ev.GetSeq(), EventType: ev.GetType(), NodeName: ev.GetStep(), Status: eventStatus(ev),
			Timestamp: timeText(ts), Result: jsonOf(ev.GetResult()), ResultRef: jsonOf(ev.GetResultRef()), Error: errorText(ev.GetError()),
		})
	}
	var completedAt *string
	if terminal(e.GetStatus()) {
		completedAt = timeText(e.GetEndTime())
	}
	writeJSON(w, http.StatusOK, struct {
		ExecutionID       string          `json:"execution_id"`
		Path              string          `json:"path"`
		Version           string          `json:"version"`
		CatalogID         string          `json:"catalog_id"`
		ParentExecutionID string          `json:"parent_execution_id,omitempty"`
		Status            string          `json:"status"`
		StartedAt         *string         `json:"started_at"`
		CompletedAt       *string         `json:"completed_at"`
		Result            json.RawMessage `json:"result"`
		Error             *string         `json:"error"`
		FailedSteps       []string        `json:"failed_steps,omitempty"`
		Events            []eventJSON     `json:"events"`
		EventsTruncated   bool            `json:"events_truncated"`
	}{
		ExecutionID: e.GetExecutionId(), Path: e.GetPath(), Version: strconv.FormatInt(e.GetVersion(), 10), CatalogID: catalogID(e.GetPath(), e.GetVersion()),
		ParentExecutionID: e.GetParentExecutionId(), Status: statusName(e.GetStatus()), StartedAt: timeText(e.GetStartTime()), CompletedAt: completedAt,
		Result: jsonOf(e.GetResult()), Error: errorText(e.GetError()), FailedSteps: e.GetFailedSteps(), Events: events, EventsTruncated: evs.GetNextPageToken() != "",
	})
}

// status handles GET /api/executions/{id}/status. completed means the execution ended
// (whichever way); failed means it failed.
func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	x, err := h.b.GetExecution(r.Context(), &apiv1.GetExecutionRequest{ExecutionId: r.PathValue("id")})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	e := x.GetExecution()
	type progress struct {
		TotalSteps     int `json:"total_steps"`
		CompletedSteps int `json:"completed_steps"`
		RunningSteps   int `json:"running_steps"`
		FailedSteps    int `json:"failed_steps"`
	}
	var p progress
	var running []string
	for name, s := range e.GetSteps() {
		p.TotalSteps++
		switch s.GetStatus() {
		case eventv1.StepStatus_STEP_STATUS_RUNNING:
			p.RunningSteps++
			running = append(running, name)
		case eventv1.StepStatus_STEP_STATUS_COMPLETED:
			p.CompletedSteps++
		case eventv1.StepStatus_STEP_STATUS_FAILED:
			p.FailedSteps++
		}
	}
	sort.Strings(running)
	current := ""
	if len(running) > 0 {
		current = running[0]
	}
	writeJSON(w, http.StatusOK, struct {
		ExecutionID string   `json:"execution_id"`
		Status      string   `json:"status"`
		Completed   bool     `json:"completed"`
		Failed      bool     `json:"failed"`
		IsCancelled bool     `json:"is_cancelled"`
		CurrentStep string   `json:"current_step,omitempty"`
		Progress    progress `json:"progress"`
	}{
		ExecutionID: e.GetExecutionId(), Status: statusName(e.GetStatus()), Completed: terminal(e.GetStatus()),
		Failed:      e.GetStatus() == eventv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		IsCancelled: e.GetStatus() == eventv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, CurrentStep: current, Progress: p,
	})
}

// cancel handles POST /api/executions/{id}/cancel {reason?}. It answers with the status the
// execution reached within cancelWait: CANCELLED normally, or how it ended if it ended
// first.
func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req struct {
		Reason string `json:"reason"`
	}
	if err := decode(r, &req, true); err != nil {
		h.writeError(w, r, err)
		return
	}
	if _, err := h.b.CancelExecution(r.Context(), &apiv1.CancelExecutionRequest{ExecutionId: id, Reason: req.Reason}); err != nil {
		h.writeError(w, r, err)
		return
	}
	st := "CANCELLED" // requested and accepted: the log will record it
	if x, err := h.b.WaitExecution(r.Context(), &apiv1.WaitExecutionRequest{ExecutionId: id, Timeout: durationpb.New(cancelWait)}); err == nil && terminal(x.GetExecution().GetStatus()) {
		st = statusName(x.GetExecution().GetStatus())
	}
	writeJSON(w, http.StatusOK, struct {
		ExecutionID string `json:"execution_id"`
		Status      string `json:"status"`
		Message     string `json:"message"`
	}{id, st, "cancellation requested"})
}

// credential handles POST /api/credentials {name, type, data, description?}. The
// description is accepted and not stored.
func (h *handler) credential(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string          `json:"name"`
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := decode(r, &req, false); err != nil {
		h.writeError(w, r, err)
		return
	}
	var data *structpb.Struct
	if len(req.Data) > 0 && string(req.Data) != "null" {
		data = &structpb.Struct{}
		if err := protojson.Unmarshal(req.Data, data); err != nil {
			h.writeError(w, r, status.Error(codes.InvalidArgument, "data: must be a JSON object")) // never quote it
			return
		}
	}
	resp, err := h.b.PutCredential(r.Context(), &apiv1.PutCredentialRequest{Name: req.Name, Type: req.Type, Data: data})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	c := resp.GetCredential()
	writeJSON(w, http.StatusOK, struct {
		Name      string  `json:"name"`
		Type      string  `json:"type"`
		Status    string  `json:"status"`
		UpdatedAt *string `json:"updated_at"`
	}{c.GetName(), c.GetType(), "created", timeText(c.GetUpdateTime())})
}
