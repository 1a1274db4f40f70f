package trigger

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/noetl/noetl/internal/domain"
)

func TestCheckSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subject, want string
	}{
		{"orders.created", ""},
		{"orders.*.eu", ""},
		{"orders.>", ""},
		{"*.created", ""},
		{"", "required"},
		{"noetl.events.3", "platform subject"},
		{"NOETL.x", "platform subject"},
		{"noetl", "platform subject"},
		{"$JS.API.STREAM.LIST", "platform subject"},
		{"_INBOX.abc", "platform subject"},
		{">", "matches every subject"},
		{"orders..x", "not a NATS subject"},
		{"orders.x.", "not a NATS subject"},
		{"orders created", "not a NATS subject"},
		{"orders.>.x", "must be the last token"},
		{"orders.a*", "a wildcard is a whole token"},
		{strings.Repeat("a", 256), "at most 255"},
	} {
		err := CheckSubject("nats.subject", tc.subject)
		if tc.want == "" {
			require.NoError(t, err, tc.subject)
			continue
		}
		require.Equal(t, codes.InvalidArgument, status.Code(err), tc.subject)
		require.Contains(t, status.Convert(err).Message(), "nats.subject: ")
		require.Contains(t, status.Convert(err).Message(), tc.want, tc.subject)
	}
}

func TestVerifyIsTheSenderSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a": 1}`)
	sig := Sign("s3cret", body)
	require.True(t, strings.HasPrefix(sig, SignaturePrefix))
	s := &Service{Sealer: plain{}}
	x := &row{Tenant: "t", ID: "id"}
	require.NoError(t, s.verify(x, []byte("s3cret"), sig, body))
	for _, bad := range []string{Sign("other", body), Sign("s3cret", []byte(`{"a": 2}`)), strings.TrimPrefix(sig, SignaturePrefix), "sha256=", "sha256=xyz", sig[:len(sig)-2]} {
		err := s.verify(x, []byte("s3cret"), bad, body)
		require.Equal(t, codes.Unauthenticated, status.Code(err), bad)
		require.Equal(t, "signature: does not verify", status.Convert(err).Message())
	}
}

// plain is a Sealer that seals nothing.
type plain struct{}

func (plain) Seal(_, _ string, p []byte) ([]byte, error) { return p, nil }
func (plain) Open(_, _ string, c []byte) ([]byte, error) { return c, nil }

func TestMergeWorkload(t *testing.T) {
	t.Parallel()
	out, err := MergeWorkload([]byte(`{"a": {"x": 1, "y": 2}, "b": 1}`), []byte(`{"a": {"y": 3}, "c": true}`), "body")
	require.NoError(t, err)
	require.JSONEq(t, `{"a": {"x": 1, "y": 3}, "b": 1, "c": true}`, string(out))
	out, err = MergeWorkload([]byte(`{"b": 1}`), nil, "message")
	require.NoError(t, err)
	require.JSONEq(t, `{"b": 1}`, string(out), "an empty message is an empty object")
	for _, bad := range []string{`[1]`, `"s"`, `null`, `{`, `1`} {
		_, err := MergeWorkload([]byte(`{}`), []byte(bad), "message")
		require.Equal(t, codes.InvalidArgument, status.Code(err), bad)
		require.Contains(t, status.Convert(err).Message(), "message: not a JSON object")
	}
	big, _ := json.Marshal(map[string]string{"x": strings.Repeat("y", domain.MaxWorkloadBytes)})
	_, err = MergeWorkload([]byte(`{}`), big, "body")
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
}

func TestKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "trigger/abc/d-1", Key("abc", "d-1"))
	require.Empty(t, Key("abc", ""), "no delivery id: no idempotency key")
	require.Error(t, CheckDeliveryID("X-Delivery-Id", strings.Repeat("a", MaxDeliveryID+1)))
	require.Error(t, CheckDeliveryID("X-Delivery-Id", "a\nb"))
	require.NoError(t, CheckDeliveryID("X-Delivery-Id", "72d3162e-cc78-11e3-81ab-4c9367dc0958"))
}

// FuzzDelivery feeds untrusted subjects, delivery ids and bodies to their checks: an error
// or a JSON object, never a panic.
func FuzzDelivery(f *testing.F) {
	f.Add("orders.>", "d-1", []byte(`{"a": 1}`))
	f.Add("noetl.x", "", []byte(`[`))
	f.Fuzz(func(t *testing.T, subject, delivery string, body []byte) {
		_ = CheckSubject("nats.subject", subject)
		_ = CheckDeliveryID("delivery_id", delivery)
		out, err := MergeWorkload([]byte(`{"base": 1}`), body, "body")
		if err == nil {
			var m map[string]any
			require.NoError(t, json.Unmarshal(out, &m))
			require.NotNil(t, m)
		}
	})
}
