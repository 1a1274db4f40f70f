package sysop_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/auth"
	"github.com/noetl/noetl/internal/sysop"
	"github.com/noetl/noetl/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// A request reaches the handler only with a principal signed under the secret for its
// operation and its very bytes: a forged one, one signed with another secret, and a body
// altered after signing are refused unread.
func TestOnlySignedRequestsReachTheHandler(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(testkit.StartNATS(t))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	trust, err := auth.NewTrust(strings.Repeat("s", 32))
	require.NoError(t, err)
	other, err := auth.NewTrust(strings.Repeat("o", 32))
	require.NoError(t, err)
	var seen []string
	sub, err := sysop.Serve(nc, trust, time.Second, func(_ context.Context, p *auth.Principal, op string, body []byte) (any, error) {
		seen = append(seen, p.Subject+" "+op)
		var req sysop.PurgeRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, err
		}
		return sysop.PurgeResponse{Executions: []sysop.Purged{{Tenant: req.Tenant, ExecutionID: "x"}}}, nil
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	ctx := context.Background()
	svc := auth.ServicePrincipal("worker-system")

	var resp sysop.PurgeResponse
	require.NoError(t, sysop.Call(ctx, nc, trust, svc, sysop.OpPurge, sysop.PurgeRequest{Tenant: "acme"}, &resp))
	require.Equal(t, "acme", resp.Executions[0].Tenant)

	err = sysop.Call(ctx, nc, other, svc, sysop.OpPurge, sysop.PurgeRequest{}, &resp)
	require.ErrorIs(t, err, sysop.ErrRefused)
	require.ErrorContains(t, err, "invalid signature")

	// A signed request whose body is changed on the way.
	body, _ := json.Marshal(sysop.PurgeRequest{Tenant: "acme"})
	signed := nats.NewMsg(sysop.Subject)
	signed.Header.Set("Noetl-System-Op", sysop.OpPurge)
	for k, v := range trust.Sign("noetl.system/purge:"+strings.Repeat("0", 64), svc) {
		signed.Header.Set(k, v)
	}
	signed.Data = body
	ans, err := nc.RequestMsg(signed, 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(ans.Data), "invalid signature", "a signature over other bytes")
	require.Equal(t, []string{"service:worker-system purge"}, seen, "only the signed request ran")
}
