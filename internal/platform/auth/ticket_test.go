package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFlightTicketsAreSignedTenantScopedAndExpire(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tr, err := NewTrust(strings.Repeat("k", 32))
	require.NoError(t, err)
	tr.now = func() time.Time { return now }
	ticket, exp := tr.SignTicket("acme", "r1", time.Minute)
	require.Equal(t, now.Add(time.Minute), exp)
	got, err := tr.VerifyTicket(ticket)
	require.NoError(t, err)
	require.Equal(t, "acme", got.Tenant)
	require.Equal(t, "r1", got.ResultID)

	other, _ := NewTrust(strings.Repeat("z", 32))
	_, err = other.VerifyTicket(ticket)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "another secret")

	payload, sig, _ := strings.Cut(string(ticket), ".")
	forged := strings.Replace(payload, payload[:4], "AAAA", 1) + "." + sig
	_, err = tr.VerifyTicket([]byte(forged))
	require.Equal(t, codes.Unauthenticated, status.Code(err), "altered payload")
	// Every bit of the signature counts: no other encoding of it is accepted.
	for i := range len(ticket) {
		for _, bit := range []byte{1, 2, 4, 8, 16, 32} {
			altered := append([]byte{}, ticket...)
			altered[i] ^= bit
			if _, err := tr.VerifyTicket(altered); err == nil {
				t.Fatalf("ticket with byte %d xor %d accepted", i, bit)
			}
		}
	}
	_, err = tr.VerifyTicket([]byte("garbage"))
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	now = now.Add(2 * time.Minute)
	_, err = tr.VerifyTicket(ticket)
	require.ErrorContains(t, err, "expired")
}
