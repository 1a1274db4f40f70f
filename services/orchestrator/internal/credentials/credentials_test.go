package credentials

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	orchv1 "github.com/noetl/noetl/gen/go/noetl/orchestrator/v1"
	"github.com/noetl/noetl/internal/domain"
	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/platform/grpcx"
	"github.com/noetl/noetl/internal/platform/pgxext"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// mapped is err as the service's error interceptor answers it.
func mapped(err error) error { return (&grpcx.Errors{Sentinels: Codes}).Status("/test", err) }

func TestCredentialsNeedTheKeyAndNeverEchoData(t *testing.T) {
	t.Parallel()
	s := &Service{} // no key, no database: every case below fails before either is used
	ctx := auth.NewContext(context.Background(), auth.ServicePrincipal("worker"))

	_, err := s.PutCredential(ctx, &orchv1.PutCredentialRequest{Name: "pg", DataJson: []byte(`{"password":"x"}`)})
	require.Equal(t, codes.FailedPrecondition, status.Code(mapped(err)))
	require.Equal(t, "NOETL_ENCRYPTION_KEY is not set", status.Convert(mapped(err)).Message())
	_, err = s.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "pg"})
	require.Equal(t, codes.FailedPrecondition, status.Code(mapped(err)))

	for name, data := range map[string]string{
		"not json":   `{"password": hunter2`,
		"not object": `["hunter2"]`,
		"empty":      ``,
	} {
		_, err := s.PutCredential(ctx, &orchv1.PutCredentialRequest{Name: "pg", DataJson: []byte(data)})
		require.Equal(t, codes.InvalidArgument, status.Code(mapped(err)), name)
		require.NotContains(t, err.Error(), "hunter2", name)
		require.Contains(t, err.Error(), "data:", name)
	}
	_, err = s.PutCredential(ctx, &orchv1.PutCredentialRequest{Name: "bad name", DataJson: []byte(`{}`)})
	require.Equal(t, codes.InvalidArgument, status.Code(mapped(err)))
	_, err = s.PutCredential(ctx, &orchv1.PutCredentialRequest{Name: "pg", DataJson: make([]byte, domain.MaxCredentialBytes+1)})
	require.ErrorContains(t, err, "exceeds the limit")
}

func TestPlaintextCredentialsAreSealedAndListsPage(t *testing.T) {
	ctx := auth.NewContext(context.Background(), auth.ServicePrincipal("worker"))
	db, err := pgxext.Open(ctx, testkit.StartMigratedPostgres(t), 4)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	sealer, err := NewSealer(bytes.Repeat([]byte{1}, KeySize))
	require.NoError(t, err)
	s := &Service{Store: NewStore(db), Sealer: sealer}

	// Rows written in plaintext before encryption at rest.
	for _, n := range []string{"legacy_a", "legacy_b"} {
		_, err := db.Exec(ctx, `INSERT INTO noetl.credential (tenant, name, type, data) VALUES ('default', $1, 'postgres', '{"password": "old-secret"}')`, n)
		require.NoError(t, err)
	}
	_, err = s.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "legacy_a"})
	require.Equal(t, codes.FailedPrecondition, status.Code(mapped(err)), "plaintext rows are not served")
	n, err := s.SealPlaintextCredentials(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.SealPlaintextCredentials(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "sealing is idempotent")
	var plaintext int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM noetl.credential c WHERE data IS NOT NULL OR position('old-secret' in c::text) > 0`).Scan(&plaintext))
	require.Zero(t, plaintext)
	res, err := s.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "legacy_b"})
	require.NoError(t, err)
	require.JSONEq(t, `{"password": "old-secret"}`, string(res.GetDataJson()))

	// Tenants are separate; lists page by name.
	_, err = s.PutCredential(ctx, &orchv1.PutCredentialRequest{Tenant: "other", Name: "legacy_a", Type: "http", DataJson: []byte(`{"token": 1}`)})
	require.NoError(t, err)
	_, err = s.PutCredential(ctx, &orchv1.PutCredentialRequest{Name: "new", DataJson: []byte(` {"k": 12345678901234567890} `)})
	require.NoError(t, err)
	res, err = s.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "new"})
	require.NoError(t, err)
	require.Equal(t, `{"k":12345678901234567890}`, string(res.GetDataJson()), "numbers keep their digits")
	var names []string
	token := ""
	for {
		page, err := s.ListCredentials(ctx, &orchv1.ListCredentialsRequest{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		for _, c := range page.GetCredentials() {
			names = append(names, c.GetName())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	require.Equal(t, []string{"legacy_a", "legacy_b", "new"}, names)
	_, err = s.DeleteCredential(ctx, &orchv1.DeleteCredentialRequest{Tenant: "other", Name: "legacy_a"})
	require.NoError(t, err)
	_, err = s.ResolveCredential(ctx, &orchv1.ResolveCredentialRequest{Name: "legacy_a"})
	require.NoError(t, err, "deleting in one tenant leaves the other's")
}
