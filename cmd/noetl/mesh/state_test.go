package mesh

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/internal/platform/auth"
)

func TestStateSecretsAreGeneratedOnceAndPrivate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, created, err := stateSecret(dir, AdminKeyFile, newAPIKey)
	require.NoError(t, err)
	require.True(t, created)
	require.True(t, auth.LooksLikeAPIKey(key))
	fi, err := os.Stat(filepath.Join(dir, AdminKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	again, created, err := stateSecret(dir, AdminKeyFile, newAPIKey)
	require.NoError(t, err)
	require.False(t, created, "the next start reuses the key")
	require.Equal(t, key, again)

	secret, _, err := stateSecret(dir, InternalSecretFile, randomBase64)
	require.NoError(t, err)
	_, err = auth.NewTrust(secret)
	require.NoError(t, err, "a generated internal secret is long enough")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.key"), []byte("\n"), 0o600))
	_, _, err = stateSecret(dir, "empty.key", newAPIKey)
	require.ErrorContains(t, err, "is empty")
}
