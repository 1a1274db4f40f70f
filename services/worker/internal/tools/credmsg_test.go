package tools

import (
	"context"
	"errors"
	"testing"
)

// TestCredentialNamedOnce: a failed resolution names the credential once, whether or not
// the resolver's message names it already.
func TestCredentialNamedOnce(t *testing.T) {
	for msg, want := range map[string]string{
		`credential "pg" not found`:       `postgres: credential "pg" not found`,
		`NOETL_ENCRYPTION_KEY is not set`: `postgres: credential "pg": NOETL_ENCRYPTION_KEY is not set`,
	} {
		r := CredentialResolver(func(context.Context, string) (string, map[string]any, error) { return "", nil, errors.New(msg) })
		_, err := resolveAuth(context.Background(), r, "postgres", "pg")
		if err == nil || err.Error() != want {
			t.Errorf("resolver said %q: got %v, want %q", msg, err, want)
		}
	}
}
