package domain

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckCredential(t *testing.T) {
	for _, ok := range []string{"pg_local", "a", "A.b-c_9", strings.Repeat("x", MaxCredentialName)} {
		require.NoError(t, CheckCredentialName(ok), ok)
	}
	for _, bad := range []string{"", "a b", "a/b", "é", "x{", strings.Repeat("x", MaxCredentialName+1)} {
		require.ErrorContains(t, CheckCredentialName(bad), "name:", bad)
		require.ErrorContains(t, CheckCredential(bad, "postgres", 10), "name:", bad)
	}
	require.NoError(t, CheckCredential("pg", strings.Repeat("t", MaxCredentialType), MaxCredentialBytes))
	require.ErrorContains(t, CheckCredential("pg", strings.Repeat("t", MaxCredentialType+1), 10), "type:")
	require.ErrorContains(t, CheckCredential("pg", "postgres", MaxCredentialBytes+1), "data:")
}
