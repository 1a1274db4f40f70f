// Package trigger stores the triggers that start executions when something happens outside
// NoETL, and fires them: webhook deliveries the gateway relays (FireTrigger, verified by an
// HMAC-SHA256 signature under the trigger's sealed secret or by the caller's API key) and
// the messages of NATS JetStream subjects (Loop). Every delivery starts with the
// idempotency key trigger/<id>/<delivery id>, so a redelivery starts nothing new and
// answers the execution the first one started.
package trigger

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/playbook"
)

// Kinds of trigger, as stored.
const (
	KindWebhook = "webhook"
	KindNATS    = "nats"
)

// SignaturePrefix starts a webhook signature: "sha256=" and the hex HMAC-SHA256 of the raw
// body under the trigger's secret.
const SignaturePrefix = "sha256="

// MaxDeliveryID is the longest delivery id (a webhook's X-Delivery-Id, a message's
// Nats-Msg-Id).
const MaxDeliveryID = 200

// ErrNotFound is returned for a trigger that does not exist.
var ErrNotFound = errors.New("trigger not found")

// Sealer seals and opens secrets at rest (the orchestrator's credential sealer).
type Sealer interface {
	Seal(tenant, name string, plaintext []byte) ([]byte, error)
	Open(tenant, name string, ciphertext []byte) ([]byte, error)
}

// Fire is one delivery to start.
type Fire struct {
	// Tenant, Name and ID are the trigger's.
	Tenant, Name, ID string
	// Path and Version (zero: the latest) name the playbook.
	Path    string
	Version int64
	// Workload is the JSON object merged over the playbook's workload: the trigger's, with
	// the delivery's merged over it.
	Workload []byte
	// Key is the start's idempotency key (Key(ID, delivery)); empty starts a new execution.
	Key string
}

// Starter starts a delivery's execution and returns its id once the start is committed.
// A start refused with InvalidArgument, NotFound, PermissionDenied, FailedPrecondition or
// ResourceExhausted is refused for good; any other failure may be retried.
type Starter func(ctx context.Context, f Fire) (executionID string, err error)

// Service implements TriggerService over noetl.trigger.
type Service struct {
	orchv1.UnimplementedTriggerServiceServer

	// DB is the orchestrator's pool.
	DB *pgxpool.Pool
	// Sealer seals webhook secrets; nil refuses webhook triggers (FailedPrecondition).
	Sealer Sealer
	// JS declares and removes the durable consumers of NATS triggers.
	JS jetstream.JetStream
	// Start starts a delivery's execution.
	Start Starter
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Key returns the idempotency key of the start of trigger id's delivery.
func Key(id, delivery string) string {
	if delivery == "" {
		return ""
	}
	return "trigger/" + id + "/" + delivery
}

// Durable is the name of the durable JetStream consumer of NATS trigger id, shared by the
// orchestrator replicas.
func Durable(id string) string { return "noetl-trigger-" + id }

// sealName is the name a trigger's secret is sealed under: no credential name holds a NUL
// byte, so a sealed secret never opens as a credential or the reverse.
func sealName(id string) string { return "trigger\x00" + id }

const columns = `name, id, kind, path, version, workload, subject, stream, last_fire_at, last_execution_id, created_by, created_at`

// row is a stored trigger.
type row struct {
	Tenant, Name, ID, Kind, Path, Subject, Stream, LastExecutionID, CreatedBy string
	Version                                                                   int64
	Workload                                                                  []byte
	LastFire                                                                  *time.Time
	Created                                                                   time.Time
}

// scanRow scans the columns, and then extra.
func scanRow(r pgx.Row, tenant string, extra ...any) (*row, error) {
	x := &row{Tenant: tenant}
	err := r.Scan(append([]any{&x.Name, &x.ID, &x.Kind, &x.Path, &x.Version, &x.Workload, &x.Subject, &x.Stream, &x.LastFire, &x.LastExecutionID, &x.CreatedBy, &x.Created}, extra...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	return x, err
}

func (x *row) proto() *orchv1.Trigger {
	p := &orchv1.Trigger{Name: x.Name, Id: x.ID, Tenant: x.Tenant, Path: x.Path, Version: x.Version,
		LastExecutionId: x.LastExecutionID, CreatedBy: x.CreatedBy, CreateTime: timestamppb.New(x.Created)}
	switch x.Kind {
	case KindWebhook:
		p.Source = &orchv1.Trigger_Webhook{Webhook: &orchv1.WebhookSource{}}
	case KindNATS:
		p.Source = &orchv1.Trigger_Nats{Nats: &orchv1.NatsSource{Subject: x.Subject, Stream: x.Stream}}
	}
	if x.LastFire != nil {
		p.LastFireTime = timestamppb.New(*x.LastFire)
	}
	var w map[string]any
	if json.Unmarshal(x.Workload, &w) == nil && len(w) > 0 {
		p.Workload, _ = structpb.NewStruct(w)
	}
	return p
}

// CheckSubject returns an InvalidArgument error naming field unless s is a NATS subject a
// trigger may consume: tokens separated by dots, none empty or holding white space, ">"
// only last, and not a subject of the platform (first token "noetl", or "$" and "_INBOX"
// subjects of the server and of replies).
func CheckSubject(field, s string) error {
	if s == "" {
		return status.Errorf(codes.InvalidArgument, "%s: required", field)
	}
	if len(s) > 255 {
		return status.Errorf(codes.InvalidArgument, "%s: %d bytes, at most 255", field, len(s))
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		if tok == "" || strings.IndexFunc(tok, unicode.IsSpace) >= 0 || strings.ContainsRune(tok, 0) {
			return status.Errorf(codes.InvalidArgument, "%s: %q is not a NATS subject (empty token or white space)", field, s)
		}
		if tok == ">" && i != len(tokens)-1 {
			return status.Errorf(codes.InvalidArgument, "%s: %q is not a NATS subject (\">\" must be the last token)", field, s)
		}
		if (strings.Contains(tok, "*") || strings.Contains(tok, ">")) && len(tok) > 1 {
			return status.Errorf(codes.InvalidArgument, "%s: %q is not a NATS subject (a wildcard is a whole token)", field, s)
		}
	}
	switch first := tokens[0]; {
	case strings.EqualFold(first, "noetl"), strings.HasPrefix(first, "$"), strings.EqualFold(first, "_INBOX"):
		// Not quoted: the gateway masks a message that names a subject of the mesh.
		return status.Errorf(codes.InvalidArgument, "%s: a platform subject (first token noetl, $... or _INBOX); triggers consume subjects of their own", field)
	case first == ">":
		return status.Errorf(codes.InvalidArgument, "%s: %q matches every subject; name the subjects of the trigger", field, s)
	}
	return nil
}

// platformStream reports whether name is one of the platform's streams.
func platformStream(name string) bool {
	return strings.HasPrefix(strings.ToUpper(name), "NOETL")
}

// consumerConfig is the durable consumer of a NATS trigger: explicit acks, a message
// unacknowledged for AckWait (longer than a start waits for its commit) redelivered, at
// most MaxInFlight messages unacknowledged at once across every replica.
func consumerConfig(id, subject string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Durable(id),
		Description:   "NoETL trigger " + id,
		FilterSubject: subject,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxAckPending: MaxInFlight,
	}
}

// Bounds of a NATS trigger's consumer.
const (
	// MaxInFlight bounds the messages of one trigger handed out and not yet acknowledged,
	// across every orchestrator replica.
	MaxInFlight = 64
	// AckWait is how long a message handed out waits for its acknowledgement before it is
	// redelivered (to any replica).
	AckWait = time.Minute
)

// CreateTrigger implements TriggerService.
func (s *Service) CreateTrigger(ctx context.Context, req *orchv1.CreateTriggerRequest) (*orchv1.CreateTriggerResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	p := req.GetTrigger()
	if !nameRE.MatchString(p.GetName()) {
		return nil, status.Errorf(codes.InvalidArgument, "name: %q does not match [a-z0-9][a-z0-9_.-]{0,62}", p.GetName())
	}
	path := playbook.CleanPath(p.GetPath())
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "path: required")
	}
	if p.GetVersion() < 0 {
		return nil, status.Error(codes.InvalidArgument, "version: must be zero (the latest) or positive")
	}
	caller := auth.FromContext(ctx)
	if domain.PoolFor(path) == "system" && !caller.Can(auth.PermSystem) {
		return nil, status.Error(codes.PermissionDenied, "path: triggers of system/ playbooks require the system role")
	}
	workload := []byte("{}")
	if w := p.GetWorkload(); w != nil {
		var err error
		if workload, err = json.Marshal(w.AsMap()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "workload: %v", err)
		}
		if len(workload) > domain.MaxWorkloadBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "workload: %d bytes exceeds the limit of %d bytes", len(workload), domain.MaxWorkloadBytes)
		}
	}
	u, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	id := u.String()
	createdBy := ""
	if caller != nil {
		createdBy = caller.Subject
	}
	var kind, subject, stream, secret string
	var sealed []byte
	switch src := p.GetSource().(type) {
	case *orchv1.Trigger_Webhook:
		kind = KindWebhook
		if s.Sealer == nil {
			return nil, status.Error(codes.FailedPrecondition, "webhook: webhook secrets are sealed with NOETL_ENCRYPTION_KEY, which this orchestrator has not")
		}
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		secret = base64.RawURLEncoding.EncodeToString(b)
		if sealed, err = s.Sealer.Seal(tenant, sealName(id), []byte(secret)); err != nil {
			return nil, err
		}
	case *orchv1.Trigger_Nats:
		kind = KindNATS
		subject, stream = src.Nats.GetSubject(), src.Nats.GetStream()
		if err := CheckSubject("nats.subject", subject); err != nil {
			return nil, err
		}
		if stream, err = s.ensureConsumer(ctx, id, subject, stream); err != nil {
			return nil, err
		}
	default:
		return nil, status.Error(codes.InvalidArgument, "source: give webhook or nats")
	}
	x, err := scanRow(s.DB.QueryRow(ctx, `INSERT INTO noetl.trigger (tenant, name, id, kind, path, version, workload, secret, subject, stream, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (tenant, name) DO NOTHING RETURNING `+columns,
		tenant, p.GetName(), id, kind, path, p.GetVersion(), workload, sealed, subject, stream, createdBy), tenant)
	if err != nil && kind == KindNATS {
		s.deleteConsumer(ctx, id, stream)
	}
	if errors.Is(err, ErrNotFound) {
		return nil, status.Errorf(codes.AlreadyExists, "name: trigger %q already exists", p.GetName())
	}
	if err != nil {
		return nil, err
	}
	return &orchv1.CreateTriggerResponse{Trigger: x.proto(), Secret: secret}, nil
}

// ensureConsumer finds the stream of a NATS trigger (named, or the one capturing subject)
// and declares the trigger's durable consumer on it; it returns the stream's name.
func (s *Service) ensureConsumer(ctx context.Context, id, subject, stream string) (string, error) {
	if s.JS == nil {
		return "", status.Error(codes.FailedPrecondition, "nats: this orchestrator consumes no NATS triggers")
	}
	if stream == "" {
		name, err := s.JS.StreamNameBySubject(ctx, subject)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", status.Errorf(codes.FailedPrecondition, "nats.subject: no JetStream stream captures %q; create one (nats stream add) or name it in nats.stream", subject)
		}
		if err != nil {
			return "", status.Errorf(codes.Unavailable, "nats: looking up the stream of %q: %v", subject, err)
		}
		stream = name
	}
	if platformStream(stream) {
		return "", status.Error(codes.InvalidArgument, "nats.stream: a platform stream (NOETL...); triggers consume streams of their own")
	}
	if _, err := s.JS.Stream(ctx, stream); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrInvalidStreamName) {
			return "", status.Errorf(codes.FailedPrecondition, "nats.stream: no JetStream stream %q", stream)
		}
		return "", status.Errorf(codes.Unavailable, "nats: %v", err)
	}
	if _, err := s.JS.CreateOrUpdateConsumer(ctx, stream, consumerConfig(id, subject)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			return "", status.Errorf(codes.InvalidArgument, "nats.subject: stream %q refuses a consumer of %q: %s", stream, subject, apiErr.Description)
		}
		return "", status.Errorf(codes.Unavailable, "nats: creating the consumer of %q: %v", subject, err)
	}
	return stream, nil
}

func (s *Service) deleteConsumer(ctx context.Context, id, stream string) {
	if s.JS != nil && stream != "" {
		_ = s.JS.DeleteConsumer(ctx, stream, Durable(id))
	}
}

func (s *Service) get(ctx context.Context, tenant, name string) (*row, error) {
	x, err := scanRow(s.DB.QueryRow(ctx, `SELECT `+columns+` FROM noetl.trigger WHERE tenant = $1 AND name = $2`, tenant, name), tenant)
	if errors.Is(err, ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "trigger %q not found", name)
	}
	return x, err
}

// GetTrigger implements TriggerService.
func (s *Service) GetTrigger(ctx context.Context, req *orchv1.GetTriggerRequest) (*orchv1.GetTriggerResponse, error) {
	x, err := s.get(ctx, domain.TenantOrDefault(req.GetTenant()), req.GetName())
	if err != nil {
		return nil, err
	}
	return &orchv1.GetTriggerResponse{Trigger: x.proto()}, nil
}

// ListTriggers implements TriggerService.
func (s *Service) ListTriggers(ctx context.Context, req *orchv1.ListTriggersRequest) (*orchv1.ListTriggersResponse, error) {
	n := int(req.GetPageSize())
	if n <= 0 {
		n = 50
	}
	n = min(n, 500)
	tenant := domain.TenantOrDefault(req.GetTenant())
	rows, err := s.DB.Query(ctx, `SELECT `+columns+` FROM noetl.trigger WHERE tenant = $1 AND name > $2 ORDER BY name LIMIT $3`, tenant, req.GetPageToken(), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &orchv1.ListTriggersResponse{}
	for rows.Next() {
		x, err := scanRow(rows, tenant)
		if err != nil {
			return nil, err
		}
		out.Triggers = append(out.Triggers, x.proto())
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out.Triggers) == n {
		out.NextPageToken = out.Triggers[n-1].GetName()
	}
	return out, nil
}

// DeleteTrigger implements TriggerService: the row goes first, so a replica that finds the
// consumer gone does not declare it again.
func (s *Service) DeleteTrigger(ctx context.Context, req *orchv1.DeleteTriggerRequest) (*orchv1.DeleteTriggerResponse, error) {
	var id, kind, stream string
	err := s.DB.QueryRow(ctx, `DELETE FROM noetl.trigger WHERE tenant = $1 AND name = $2 RETURNING id, kind, stream`, domain.TenantOrDefault(req.GetTenant()), req.GetName()).Scan(&id, &kind, &stream)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, status.Errorf(codes.NotFound, "trigger %q not found", req.GetName())
	}
	if err != nil {
		return nil, err
	}
	if kind == KindNATS {
		s.deleteConsumer(ctx, id, stream)
	}
	return &orchv1.DeleteTriggerResponse{}, nil
}

// CheckDeliveryID returns an InvalidArgument error naming field unless id is a usable
// delivery id: at most MaxDeliveryID bytes of printable characters.
func CheckDeliveryID(field, id string) error {
	if len(id) > MaxDeliveryID {
		return status.Errorf(codes.InvalidArgument, "%s: %d bytes, at most %d", field, len(id), MaxDeliveryID)
	}
	if strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return status.Errorf(codes.InvalidArgument, "%s: holds a character that is not printable", field)
	}
	return nil
}

// Sign returns the signature of body under secret, as a webhook sender computes it.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	_, _ = m.Write(body)
	return SignaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// errBadSignature is what a caller learns of a signature that does not verify: nothing
// more.
var errBadSignature = status.Error(codes.Unauthenticated, "signature: does not verify")

// verify checks signature against body under the secret of trigger x, in constant time.
func (s *Service) verify(x *row, sealed []byte, signature string, body []byte) error {
	hexSig, ok := strings.CutPrefix(signature, SignaturePrefix)
	if !ok {
		return errBadSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return errBadSignature
	}
	if s.Sealer == nil {
		return status.Error(codes.FailedPrecondition, "webhook: secrets are sealed with NOETL_ENCRYPTION_KEY, which this orchestrator has not")
	}
	secret, err := s.Sealer.Open(x.Tenant, sealName(x.ID), sealed)
	if err != nil {
		return fmt.Errorf("trigger %s: opening its secret: %w", x.ID, err)
	}
	m := hmac.New(sha256.New, secret)
	_, _ = m.Write(body)
	if !hmac.Equal(m.Sum(nil), got) {
		return errBadSignature
	}
	return nil
}

// FireTrigger implements TriggerService: a service caller (the gateway relaying an
// unauthenticated call) must sign the body with the trigger's secret; a user caller must
// hold the execute permission.
func (s *Service) FireTrigger(ctx context.Context, req *orchv1.FireTriggerRequest) (*orchv1.FireTriggerResponse, error) {
	tenant := domain.TenantOrDefault(req.GetTenant())
	caller := auth.FromContext(ctx)
	if caller == nil {
		return nil, status.Error(codes.Unauthenticated, "credentials: required")
	}
	var sealed []byte
	x, err := scanRow(s.DB.QueryRow(ctx, `SELECT `+columns+`, secret FROM noetl.trigger WHERE tenant = $1 AND name = $2`, tenant, req.GetName()), tenant, &sealed)
	if errors.Is(err, ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "trigger %q not found", req.GetName())
	}
	if err != nil {
		return nil, err
	}
	if x.Kind != KindWebhook {
		return nil, status.Errorf(codes.FailedPrecondition, "trigger %q is fed by NATS, not a webhook", req.GetName())
	}
	switch {
	case caller.Service:
		if req.GetSignature() == "" {
			return nil, status.Error(codes.Unauthenticated, "signature: required")
		}
		if err := s.verify(x, sealed, req.GetSignature(), req.GetBody()); err != nil {
			return nil, err
		}
	case !caller.Can(auth.PermExecute):
		return nil, status.Error(codes.PermissionDenied, "firing a trigger needs the execute permission")
	}
	if err := CheckDeliveryID("delivery_id", req.GetDeliveryId()); err != nil {
		return nil, err
	}
	workload, err := MergeWorkload(x.Workload, req.GetBody(), "body")
	if err != nil {
		return nil, err
	}
	id, err := s.Start(ctx, Fire{Tenant: tenant, Name: x.Name, ID: x.ID, Path: x.Path, Version: x.Version, Workload: workload, Key: Key(x.ID, req.GetDeliveryId())})
	if err != nil {
		return nil, err
	}
	if err := Fired(ctx, s.DB, x.ID, id); err != nil {
		return nil, err
	}
	return &orchv1.FireTriggerResponse{ExecutionId: id}, nil
}

// Fired records a delivery's execution as the trigger's last.
func Fired(ctx context.Context, db *pgxpool.Pool, id, executionID string) error {
	_, err := db.Exec(ctx, `UPDATE noetl.trigger SET last_fire_at = now(), last_execution_id = $2 WHERE id = $1`, id, executionID)
	return err
}

// MergeWorkload returns the JSON object delivery merged over base (both JSON objects; an
// empty delivery is an empty object), refusing a delivery that is not a JSON object, or a
// result over the workload limit, with an error naming field.
func MergeWorkload(base, delivery []byte, field string) ([]byte, error) {
	var b map[string]any
	if err := json.Unmarshal(base, &b); err != nil || b == nil {
		b = map[string]any{}
	}
	if len(delivery) > 0 {
		var d map[string]any
		if err := json.Unmarshal(delivery, &d); err != nil || d == nil {
			return nil, status.Errorf(codes.InvalidArgument, "%s: not a JSON object", field)
		}
		b = domain.MergeWorkload(b, d)
	}
	out, err := json.Marshal(b)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	if len(out) > domain.MaxWorkloadBytes {
		return nil, status.Errorf(codes.ResourceExhausted, "%s: the workload is %d bytes of JSON, over the limit of %d bytes", field, len(out), domain.MaxWorkloadBytes)
	}
	return out, nil
}
