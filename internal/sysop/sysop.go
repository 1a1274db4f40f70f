// Package sysop is the materializer's privileged surface: the requests the system_*
// tools send it over core NATS request/reply (subject Subject, queue group Queue) and
// its answers. The materializer is the sole writer of noetl.event, so deleting an
// execution's log (retention) is a request it alone executes, answered only after its
// transaction committed; it also keeps its own lease rows clean.
//
// A request carries a principal signed with the internal secret (auth.Trust), bound to the
// operation and the request's bytes, so it cannot be forged without the secret nor
// replayed with another body. A service principal may purge any tenant; any other
// principal only its own.
package sysop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/metadata"

	"github.com/noetl/noetl/internal/platform/auth"
)

// Subject is where the materializer serves system requests; Queue is its queue group, so
// one replica answers each request.
const (
	Subject = "noetl.system.materializer"
	Queue   = "materializer"
)

// Operations.
const (
	// OpPurge deletes terminal executions past their retention (PurgeRequest).
	OpPurge = "purge"
	// OpCleanup deletes dead replica rows and releases expired leases (CleanupRequest).
	OpCleanup = "cleanup"
)

// Header names of a request's operation.
const headerOp = "Noetl-System-Op"

// MaxPurge bounds the executions one purge request deletes.
const MaxPurge = 1000

// MinRetention is the shortest retention a purge accepts: an execution is kept at least
// this long after it ended, as long as the events stream keeps its events (24 h), so no
// event of a purged execution can still be read from the stream.
const MinRetention = 24 * time.Hour

// ErrRefused is the error of a request the materializer refused (its message says why).
var ErrRefused = errors.New("refused")

// PurgeRequest asks for the terminal executions that ended more than their tenant's
// retention ago to be deleted with their events and timers.
type PurgeRequest struct {
	// Tenant, when set, limits the purge to one tenant. A non-service principal's
	// request is limited to its own tenant whatever this says.
	Tenant string `json:"tenant,omitempty"`
	// RetentionMS is the retention of every tenant not in Tenants, in milliseconds.
	RetentionMS int64 `json:"retention_ms"`
	// Tenants maps a tenant to its own retention in milliseconds.
	Tenants map[string]int64 `json:"tenants,omitempty"`
	// Exclude names tenants left alone (those that override system/retention).
	Exclude []string `json:"exclude,omitempty"`
	// Limit bounds the executions deleted (1..MaxPurge; zero: MaxPurge).
	Limit int `json:"limit,omitempty"`
}

// Purged is one deleted execution.
type Purged struct {
	Tenant      string `json:"tenant"`
	ExecutionID string `json:"execution_id"`
	// Events is how many events of its log were deleted.
	Events int64 `json:"events"`
}

// PurgeResponse is what a committed purge deleted.
type PurgeResponse struct {
	Executions []Purged `json:"executions"`
	// More is set when the limit was reached: more executions may be due.
	More bool `json:"more"`
}

// CleanupRequest asks for the materializer's own dead rows to be removed.
type CleanupRequest struct {
	// GraceMS is how long past its expiry a replica row or a lease is left alone.
	GraceMS int64 `json:"grace_ms"`
}

// CleanupResponse counts what a cleanup removed.
type CleanupResponse struct {
	// Replicas is the dead replica rows deleted (noetl.materializer_replica).
	Replicas int64 `json:"replicas"`
	// Leases is the expired partition leases released (noetl.materializer_partition).
	Leases int64 `json:"leases"`
}

// reply is the wire form of an answer.
type reply struct {
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// method is what a request's signature is bound to: the operation and its body.
func method(op string, body []byte) string {
	sum := sha256.Sum256(body)
	return "noetl.system/" + op + ":" + hex.EncodeToString(sum[:])
}

// Call sends op with req to the materializer as principal p and decodes the answer into
// resp. A refusal is an error wrapping ErrRefused.
func Call(ctx context.Context, nc *nats.Conn, trust *auth.Trust, p *auth.Principal, op string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(Subject)
	msg.Data = body
	msg.Header.Set(headerOp, op)
	for k, v := range trust.Sign(method(op, body), p) {
		msg.Header.Set(k, v)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	ans, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("materializer %s request: %w", op, err)
	}
	var r reply
	if err := json.Unmarshal(ans.Data, &r); err != nil {
		return fmt.Errorf("materializer %s answer: %w", op, err)
	}
	if r.Error != "" {
		return fmt.Errorf("materializer %s: %w: %s", op, ErrRefused, r.Error)
	}
	return json.Unmarshal(r.Result, resp)
}

// Handler executes one verified request: op, its body and the principal that signed it.
type Handler func(ctx context.Context, p *auth.Principal, op string, body []byte) (any, error)

// Serve answers the requests on Subject in queue group Queue with h until the returned
// subscription is drained. A request whose signature does not verify is refused unread.
func Serve(nc *nats.Conn, trust *auth.Trust, timeout time.Duration, h Handler) (*nats.Subscription, error) {
	return nc.QueueSubscribe(Subject, Queue, func(m *nats.Msg) {
		op := m.Header.Get(headerOp)
		md := metadata.MD{}
		for _, k := range []string{auth.MDPrincipal, auth.MDSignature} {
			if v := m.Header.Values(k); len(v) > 0 {
				md[k] = v
			}
		}
		var r reply
		p, err := trust.Verify(method(op, m.Data), md)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			var out any
			out, err = h(ctx, p, op, m.Data)
			cancel()
			if err == nil {
				r.Result, err = json.Marshal(out)
			}
		}
		if err != nil {
			r.Error = err.Error()
		}
		b, _ := json.Marshal(r)
		_ = m.Respond(b)
	})
}
