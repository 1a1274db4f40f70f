// Package apierr shapes the errors of the public API at the gateway, its edge: every error
// status carries a google.rpc.ErrorInfo (domain "noetl.io" and a reason), an InvalidArgument
// whose message names a field of the request carries a google.rpc.BadRequest field
// violation, and internal errors are masked: the caller sees "internal error (correlation
// id X)" and the gateway logs the original error with X. grpc-gateway renders the same
// details in REST JSON error bodies.
package apierr

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/noetl/noetl/internal/platform/natsx"
)

// Domain is the ErrorInfo domain of every NoETL error.
const Domain = "noetl.io"

// ErrorInfo reasons the gateway sets itself. Other errors get the name of their code
// (for example "NOT_FOUND"), unless the service that returned them set a reason.
const (
	// ReasonInternal marks a masked internal error; its metadata holds the correlation id.
	ReasonInternal = "INTERNAL"
	// ReasonRateLimited refuses a call past its tenant's request rate.
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonTooManyInFlight refuses a call past its tenant's calls in flight.
	ReasonTooManyInFlight = "TOO_MANY_IN_FLIGHT"
	// ReasonTooManyWaits refuses a waiting call (a wait, a start that waits, a watch) past
	// its tenant's waiting calls.
	ReasonTooManyWaits = "TOO_MANY_WAITS"
	// ReasonTooManyTenants refuses a call of a new tenant while the gateway tracks the most
	// tenants it may, all busy.
	ReasonTooManyTenants = "TOO_MANY_TENANTS"
	// ReasonTooManyWatches refuses a watch while the orchestrator serves as many as it may.
	ReasonTooManyWatches = "TOO_MANY_WATCHES"
	// ReasonInvalidPlaybook refuses a playbook that does not parse or validate.
	ReasonInvalidPlaybook = "INVALID_PLAYBOOK"
	// ReasonBodyTooLarge refuses a REST request body over the gateway's body limit.
	ReasonBodyTooLarge = "BODY_TOO_LARGE"
	// ReasonMessageTooLarge refuses a request message over the gateway's message limit
	// (the same number as the body limit).
	ReasonMessageTooLarge = "MESSAGE_TOO_LARGE"
	// ReasonWorkloadTooLarge refuses a start whose workload is over the public workload
	// limit.
	ReasonWorkloadTooLarge = "WORKLOAD_TOO_LARGE"
	// ReasonContentTooLarge refuses a playbook whose content is over the public size limit.
	ReasonContentTooLarge = "CONTENT_TOO_LARGE"
	// ReasonVariablesTooLarge refuses a write of execution variables over their bounds (a
	// value's size, or the execution's count or total size).
	ReasonVariablesTooLarge = "VARIABLES_TOO_LARGE"
	// ReasonAuthThrottled refuses a call from an address, or naming an API key id, that
	// failed authentication too often lately.
	ReasonAuthThrottled = "TOO_MANY_AUTH_FAILURES"
)

// TooLarge reports whether reason refuses a request for its size (answered over REST with
// HTTP 413 rather than the 429 of other RESOURCE_EXHAUSTED errors).
func TooLarge(reason string) bool {
	switch reason {
	case ReasonBodyTooLarge, ReasonMessageTooLarge, ReasonWorkloadTooLarge, ReasonContentTooLarge, ReasonVariablesTooLarge:
		return true
	}
	return false
}

// Reason returns the reason of the status's NoETL ErrorInfo, or "".
func Reason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info.GetReason()
		}
	}
	return ""
}

// MetaCorrelationID is the ErrorInfo metadata key of a masked error's correlation id.
const MetaCorrelationID = "correlation_id"

// New returns a status error of code with msg and an ErrorInfo of reason (with the
// metadata, which may be nil), plus any further details.
func New(code codes.Code, reason, msg string, meta map[string]string, details ...protoadapt.MessageV1) error {
	d := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: meta}}, details...)
	return with(status.New(code, msg), d...).Err()
}

// FieldViolation returns an InvalidArgument status error of msg with an ErrorInfo of
// reason and a BadRequest naming field with description.
func FieldViolation(reason, field, description, msg string) error {
	return New(codes.InvalidArgument, reason, msg, nil, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: description}}})
}

// RetryInfo returns the detail that asks a client to retry after d.
func RetryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// with returns st with details appended; st itself when they cannot be attached.
func with(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	if len(details) == 0 {
		return st
	}
	out, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return out
}

// Edge returns err as the public API returns it (nil stays nil). method names the call
// (a gRPC method or an HTTP route) in the log; req, when known, is the request, whose
// fields an InvalidArgument message may name ("execution_id: required"). Edge is
// idempotent: an error it already shaped passes unchanged.
func Edge(log *slog.Logger, method string, req proto.Message, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		st = status.FromContextError(err)
	}
	switch st.Code() {
	case codes.OK:
		return err
	case codes.Internal, codes.Unknown, codes.DataLoss:
		if CorrelationID(st) != "" {
			return st.Err()
		}
		return mask(log, method, st)
	}
	if Leaks(st.Message()) {
		return maskLeak(log, method, st)
	}
	var info *errdetails.ErrorInfo
	var bad *errdetails.BadRequest
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.BadRequest:
			bad = d
		}
	}
	var add []protoadapt.MessageV1
	if info == nil {
		add = append(add, &errdetails.ErrorInfo{Reason: CodeName(st.Code()), Domain: Domain})
	}
	if bad == nil && st.Code() == codes.InvalidArgument {
		if field, desc, ok := namedField(req, st.Message()); ok {
			add = append(add, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}})
		}
	}
	return with(st, add...).Err()
}

// mask replaces an internal error with one that names only a correlation id, and logs the
// original with that id.
func mask(log *slog.Logger, method string, st *status.Status) error {
	id := newCorrelationID()
	if log != nil {
		log.Error("internal error", slog.String("correlation_id", id), slog.String("method", method),
			slog.String("code", st.Code().String()), slog.String("error", st.Message()))
	}
	return New(codes.Internal, ReasonInternal, fmt.Sprintf("internal error (correlation id %s)", id), map[string]string{MetaCorrelationID: id})
}

// internalNames are fragments that name the mesh's internals: NATS subjects, streams and
// errors, the internal gRPC services, and the transport errors of calls to them (which
// carry internal addresses). No public message has any of them.
var internalNames = append(natsx.SubjectPrefixes(),
	natsx.StreamEvents, natsx.StreamCommands, natsx.StreamCommitted,
	"nats:", "jetstream", "publish ",
	"noetl.orchestrator.v1", "noetl.statebuilder.v1", "noetl.resultstore.v1",
	"connection error", "transport:", "dial tcp", "connection refused",
)

// Leaks reports whether msg names an internal part of the mesh (a NATS subject or stream,
// an internal service, an internal address).
func Leaks(msg string) bool {
	for _, n := range internalNames {
		if strings.Contains(msg, n) {
			return true
		}
	}
	return false
}

// maskLeak replaces the message of an error that names internals (Leaks) with the public
// text of its code and a correlation id, keeping the code and any RetryInfo, and logs the
// original with that id.
func maskLeak(log *slog.Logger, method string, st *status.Status) error {
	id := newCorrelationID()
	if log != nil {
		log.Error("error naming internals masked", slog.String("correlation_id", id), slog.String("method", method),
			slog.String("code", st.Code().String()), slog.String("error", st.Message()))
	}
	var keep []protoadapt.MessageV1
	if d, ok := RetryAfter(st); ok {
		keep = append(keep, RetryInfo(d))
	}
	return New(st.Code(), CodeName(st.Code()), fmt.Sprintf("%s (correlation id %s)", publicText(st.Code()), id), map[string]string{MetaCorrelationID: id}, keep...)
}

// publicText is what a masked error of code says.
func publicText(c codes.Code) string {
	switch c {
	case codes.Unavailable:
		return "service unavailable; retry"
	case codes.DeadlineExceeded:
		return "deadline exceeded"
	case codes.ResourceExhausted:
		return "resource exhausted"
	case codes.InvalidArgument:
		return "invalid argument"
	}
	return strings.ToLower(strings.ReplaceAll(CodeName(c), "_", " "))
}

func newCorrelationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CorrelationID returns the correlation id of an error masked by Edge, or "".
func CorrelationID(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain && info.GetReason() == ReasonInternal {
			return info.GetMetadata()[MetaCorrelationID]
		}
	}
	return ""
}

// RetryAfter returns the delay of the status's RetryInfo detail; false without one.
func RetryAfter(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// RetryAfterSeconds spells d as the value of an HTTP Retry-After header: whole seconds,
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return fmt.Sprint(max(s, 1))
}

// CodeName spells a gRPC code as in google.rpc.Code: InvalidArgument is
// "INVALID_ARGUMENT".
func CodeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// namedField splits an InvalidArgument message "field: description" whose field (a dotted
// path, optionally indexed) starts with a field of req, by its proto or JSON name.
func namedField(req proto.Message, msg string) (field, desc string, ok bool) {
	if req == nil {
		return "", "", false
	}
	field, desc, ok = strings.Cut(msg, ": ")
	if !ok || field == "" || desc == "" {
		return "", "", false
	}
	for _, r := range field {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '[' || r == ']') {
			return "", "", false
		}
	}
	top, _, _ := strings.Cut(field, ".")
	top, _, _ = strings.Cut(top, "[")
	fields := req.ProtoReflect().Descriptor().Fields()
	if fields.ByName(protoreflect.Name(top)) == nil && fields.ByJSONName(top) == nil {
		return "", "", false
	}
	return field, desc, true
}
