// Package webhook serves a trigger's webhook (Route): a call with credentials fires the
// trigger through the gateway's own gRPC server, like every REST call; a call with a
// signature is relayed with its raw body to the orchestrator, which verifies it under the
// trigger's secret. Invariant: a signed call counts against its client address as a failed
// authentication would (package guard): refused while the address is throttled, audited and
// counted as a failure when the orchestrator refuses its signature; and it counts against
// its tenant's limits (package edge) like the tenant's authenticated calls.
package webhook

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/services/gateway/internal/apierr"
	"github.com/noetl/noetl/services/gateway/internal/clientaddr"
	"github.com/noetl/noetl/services/gateway/internal/edge"
	"github.com/noetl/noetl/services/gateway/internal/guard"
	"github.com/noetl/noetl/services/gateway/internal/loopback"
)

// Route is the webhook of a trigger. It is served by hand, not by grpc-gateway's
// binding of FireTrigger, because a signature is checked over the raw body.
const Route = "POST /v1/triggers/{name}"

// Headers of a webhook call. The GitHub spellings are accepted as well, so a repository's
// webhook points at a trigger as it is.
const (
	signatureHeader       = "X-Noetl-Signature"
	githubSignatureHeader = "X-Hub-Signature-256"
	deliveryHeader        = "X-Delivery-Id"
	githubDeliveryHeader  = "X-GitHub-Delivery"
)

// New serves Route: FireTrigger over public (the loopback connection) for a call with
// credentials, over internal (the orchestrator) for a signed one, with g's throttle and
// audit and lim's limits; errors are written by errors, the response by m.
func New(public apiv1.TriggerServiceClient, internal orchv1.TriggerServiceClient, g *guard.Guard, lim *edge.Limits, m runtime.Marshaler, errors func(w http.ResponseWriter, r *http.Request, err error)) http.Handler {
	return &handler{public: public, internal: internal, guard: g, limits: lim, m: m, errors: errors}
}

// handler serves Route. A call with credentials (Authorization or X-Api-Key) is
// FireTrigger over the loopback connection, through the guard like every REST call; a
// call without is relayed to the orchestrator with its raw body and signature, which the
// orchestrator verifies under the trigger's secret (the tenant is the query parameter
// tenant, "default" without it) and counted against that tenant's limits. A call with
// neither is refused. Failed signatures count against the client address as failed
// authentications do (guard).
type handler struct {
	public   apiv1.TriggerServiceClient
	internal orchv1.TriggerServiceClient
	guard    *guard.Guard
	limits   *edge.Limits
	m        runtime.Marshaler
	errors   func(w http.ResponseWriter, r *http.Request, err error)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name := r.PathValue("name")
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(domain.MaxWorkloadBytes)+1))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		h.errors(w, r, bodyTooLarge(mbe.Limit))
		return
	case err != nil:
		h.errors(w, r, status.Errorf(codes.InvalidArgument, "body: reading it failed: %v", err))
		return
	case len(body) > domain.MaxWorkloadBytes:
		h.errors(w, r, bodyTooLarge(int64(domain.MaxWorkloadBytes)))
		return
	case len(strings.TrimSpace(string(body))) == 0:
		h.errors(w, r, status.Error(codes.InvalidArgument, "body: required: a JSON object, the workload merged over the trigger's"))
		return
	}
	workload := &structpb.Struct{}
	if err := protojson.Unmarshal(body, workload); err != nil {
		h.errors(w, r, status.Errorf(codes.InvalidArgument, "body: not a JSON object: %v", err))
		return
	}
	delivery := r.Header.Get(deliveryHeader)
	if delivery == "" {
		delivery = r.Header.Get(githubDeliveryHeader)
	}
	if delivery == "" {
		delivery = r.URL.Query().Get("deliveryId") // FireTrigger's field, as the binding would read it
	}
	signature := r.Header.Get(signatureHeader)
	if signature == "" {
		signature = r.Header.Get(githubSignatureHeader)
	}
	var executionID string
	switch {
	case r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "":
		resp, err := h.public.FireTrigger(loopback.Outgoing(r), &apiv1.FireTriggerRequest{Name: name, Workload: workload, DeliveryId: delivery})
		if err != nil {
			h.errors(w, r, err)
			return
		}
		executionID = resp.GetExecutionId()
	case signature != "":
		addr := "address " + clientaddr.FromREST(ctx)
		method := "POST /v1/triggers/{name}"
		if key, after, ok := h.guard.Failures().Throttled(addr); ok {
			err := apierr.New(codes.ResourceExhausted, apierr.ReasonAuthThrottled,
				fmt.Sprintf("authentication: too many failed attempts for %s; retry after %s", key, after.Round(100*time.Millisecond)), nil, apierr.RetryInfo(after))
			h.guard.Audit(ctx, guard.OutcomeThrottled, method, clientaddr.FromREST(ctx), "signature", "", nil, err)
			h.errors(w, r, err)
			return
		}
		tenant := r.URL.Query().Get("tenant")
		if tenant == "" {
			tenant = "default"
		}
		if err := auth.CheckTenant("tenant", tenant); err != nil {
			h.errors(w, r, err)
			return
		}
		// The tenant's limits apply as to its authenticated calls. (The principal is only
		// the limiter's: the call itself is signed as the gateway, carrying the signature.)
		release, err := h.limits.Acquire(auth.NewContext(ctx, &auth.Principal{Tenant: tenant, Subject: "webhook:" + name}), false)
		if err != nil {
			h.errors(w, r, err)
			return
		}
		defer release()
		resp, err := h.internal.FireTrigger(auth.ServiceCall(ctx), &orchv1.FireTriggerRequest{Tenant: tenant, Name: name, Body: body, DeliveryId: delivery, Signature: signature})
		if status.Code(err) == codes.Unauthenticated {
			h.guard.Failures().Fail(addr)
			h.guard.Audit(ctx, guard.OutcomeUnauthenticated, method, clientaddr.FromREST(ctx), "signature", "", nil, err)
		}
		if err != nil {
			h.errors(w, r, err)
			return
		}
		executionID = resp.GetExecutionId()
	default:
		h.errors(w, r, status.Errorf(codes.Unauthenticated, "credentials: required: a %s header (sha256= and the hex HMAC-SHA256 of the body under the trigger's secret) or an API key", signatureHeader))
		return
	}
	out, err := h.m.Marshal(&apiv1.FireTriggerResponse{ExecutionId: executionID})
	if err != nil {
		h.errors(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// bodyTooLarge is the RESOURCE_EXHAUSTED error of a webhook body over limit bytes.
func bodyTooLarge(limit int64) error {
	return apierr.New(codes.ResourceExhausted, apierr.ReasonBodyTooLarge, fmt.Sprintf("body: larger than the limit of %d bytes", limit), map[string]string{"limit": fmt.Sprint(limit)})
}
