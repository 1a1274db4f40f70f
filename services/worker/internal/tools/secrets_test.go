package tools

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	scrubber "github.com/noetl/noetl/services/worker/internal/scrub"
)

// secretStore resolves one credential, "api", and counts the calls.
func secretStore(calls *int) CredentialResolver {
	return func(_ context.Context, name string) (string, map[string]any, error) {
		*calls++
		if name != "api" {
			return "", nil, &Error{Msg: "not found", Retryable: false}
		}
		return "generic", map[string]any{"host": "api.example.com", "user": "svc", "token": "tok-0123456789", "port": float64(8443),
			"extra": map[string]any{"nested": "deep-value"}}, nil
	}
}

func TestSecretsResultHoldsFieldNamesAndMasksOnly(t *testing.T) {
	t.Parallel()
	var calls int
	sc := scrubber.New(nil)
	s := &Secrets{Resolve: secretStore(&calls), Register: func(_ context.Context, v string) { sc.AddSecret(v) }}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want map[string]any
	}{
		{"every field", map[string]any{"auth": "api"}, map[string]any{"host": "***", "user": "***", "token": "***", "port": "***", "extra": "***"}},
		{"picked fields", map[string]any{"credential": "api", "fields": []any{"token", "user", "token"}}, map[string]any{"token": "***", "user": "***"}},
		{"unified auth form", map[string]any{"auth": map[string]any{"creds": map[string]any{"source": "credential", "key": "api"}}}, map[string]any{"host": "***", "user": "***", "token": "***", "port": "***", "extra": "***"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := s.Run(context.Background(), &Call{Kind: "secrets", Config: tc.cfg})
			require.NoError(t, err)
			require.Equal(t, map[string]any{"credential": "api", "type": "generic", "fields": tc.want}, out)
		})
	}
	// Every value fetched, not only the secret-named ones, is masked wherever it shows up
	// in what the command produces.
	for _, v := range []string{"api.example.com", "tok-0123456789", "8443", "deep-value"} {
		require.Equal(t, "echo ***", sc.String("echo "+v), v)
	}
	// Shorter than scrubber.MinLen: not scrubbed elsewhere, which is why the result never
	// carries a value at all.
	require.Equal(t, "svc", sc.String("svc"))
}

func TestSecretsRefusals(t *testing.T) {
	t.Parallel()
	var calls int
	s := &Secrets{Resolve: secretStore(&calls)}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		msg  string
	}{
		{"no credential", map[string]any{}, "secrets: tool.auth (or tool.credential) must name a stored credential"},
		{"inline data", map[string]any{"auth": map[string]any{"password": "p4ssw0rd!"}}, "must name a stored credential, not hold its data"},
		{"missing field", map[string]any{"auth": "api", "fields": []any{"password", "token"}}, `secrets: credential "api" has no field "password" (it has: extra, host, port, token, user)`},
		{"bad fields", map[string]any{"auth": "api", "fields": "token"}, "tool.fields must be a list of field names"},
		{"unknown credential", map[string]any{"auth": "nope"}, `secrets: credential "nope": not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Run(context.Background(), &Call{Kind: "secrets", Config: tc.cfg})
			var te *Error
			require.True(t, errors.As(err, &te), "%v", err)
			require.Contains(t, te.Msg, tc.msg)
			require.NotContains(t, te.Msg, "tok-0123456789")
		})
	}
	_, err := (&Secrets{}).Run(context.Background(), &Call{Kind: "secrets", Config: map[string]any{"auth": "api"}})
	require.ErrorContains(t, err, "no credential resolver")
}
