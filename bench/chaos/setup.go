package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	apiv1 "github.com/noetl/noetl/gen/go/noetl/api/v1"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
)

// tenant is one of the load's tenants: its API key (admin and system roles, created by
// the bootstrap key through the admin API), its connection to the gateway, its Postgres
// role for the probes and its playbooks.
type tenant struct {
	name, key  string
	role       string // the Postgres role its chaos_pg credential connects as
	timerDelay int    // seconds of its timer playbook's delayed retry
	conn       *grpc.ClientConn
	exec       apiv1.ExecutionServiceClient
}

// setupTenants creates the tenants' keys, credentials (the probes' database and the
// sentinel token) and playbooks, retrying each call until it succeeds or d passes (the
// cluster has just started).
func setupTenants(ctx context.Context, c *cluster, n int, sentinel, echoURL string, rng *mrand.Rand, d time.Duration) ([]*tenant, error) {
	admin, err := grpcx.DialSigned(c.grpcAddr, auth.Bearer(c.adminKey))
	if err != nil {
		return nil, err
	}
	defer func() { _ = admin.Close() }()
	adm := apiv1.NewAdminServiceClient(admin)
	var out []*tenant
	for i := range n {
		t := &tenant{name: fmt.Sprintf("chaos-t%d", i), role: fmt.Sprintf("chaos_t%d", i), timerDelay: 5 + rng.IntN(26)}
		var resp *apiv1.CreateApiKeyResponse
		if err := retry(ctx, d, func(ctx context.Context) error {
			var err error
			resp, err = adm.CreateApiKey(ctx, &apiv1.CreateApiKeyRequest{Tenant: t.name, Roles: []string{"admin", "system"}, Name: "chaos load"})
			return err
		}); err != nil {
			return nil, fmt.Errorf("create the key of %s: %w", t.name, err)
		}
		t.key = resp.GetSecret()
		if t.conn, err = grpcx.DialSigned(c.grpcAddr, auth.Bearer(t.key)); err != nil {
			return nil, err
		}
		t.exec = apiv1.NewExecutionServiceClient(t.conn)
		out = append(out, t)
		pw := make([]byte, 16)
		if _, err := rand.Read(pw); err != nil {
			return nil, err
		}
		password := "pw-" + hex.EncodeToString(pw)
		if err := c.createTenantRole(ctx, t.role, password); err != nil {
			return nil, err
		}
		creds := apiv1.NewCredentialServiceClient(t.conn)
		for _, cr := range []struct {
			name, typ string
			data      map[string]any
		}{
			{"chaos_pg", "postgres", map[string]any{"connection_string": c.pgURLFor(t.role, password)}},
			{"chaos_token", "http_bearer", map[string]any{"token": sentinel}},
		} {
			data, err := structpb.NewStruct(cr.data)
			if err != nil {
				return nil, err
			}
			if err := retry(ctx, d, func(ctx context.Context) error {
				_, err := creds.PutCredential(ctx, &apiv1.PutCredentialRequest{Name: cr.name, Type: cr.typ, Data: data})
				return err
			}); err != nil {
				return nil, fmt.Errorf("credential %s of %s: %w", cr.name, t.name, err)
			}
		}
		cat := apiv1.NewCatalogServiceClient(t.conn)
		for _, doc := range tenantPlaybooks(t.name, t.timerDelay, echoURL) {
			var reg *apiv1.RegisterPlaybookResponse
			if err := retry(ctx, d, func(ctx context.Context) error {
				var err error
				reg, err = cat.RegisterPlaybook(ctx, &apiv1.RegisterPlaybookRequest{Content: doc})
				return err
			}); err != nil {
				return nil, fmt.Errorf("register a playbook of %s: %w\n%s", t.name, err, doc)
			}
			if w := reg.GetPlaybook().GetWarnings(); len(w) > 0 {
				return nil, fmt.Errorf("playbook %s registered with warnings: %s", reg.GetPlaybook().GetPath(), strings.Join(w, "; "))
			}
		}
	}
	return out, nil
}

// retry calls f (with a 10 s deadline per call) until it succeeds, fails for good (an
// invalid argument, a permission) or d passes.
func retry(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	return waitFor(ctx, d, 250*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := f(cctx)
		switch status.Code(err) {
		case codes.InvalidArgument, codes.PermissionDenied, codes.AlreadyExists, codes.Unimplemented:
			return fmt.Errorf("%w: %w", errPermanent, err)
		}
		return err
	})
}

// close closes the tenants' connections.
func closeTenants(ts []*tenant) {
	for _, t := range ts {
		if t.conn != nil {
			_ = t.conn.Close()
		}
	}
}
