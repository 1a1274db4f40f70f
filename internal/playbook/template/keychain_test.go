package template

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeychainRefs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   any
		want []string
		all  bool
	}{
		{"Bearer {{ keychain.api.access_token }}", []string{"api"}, false},
		{map[string]any{"h": `{{ keychain["pg"].password }}`, "x": []any{"{{ keychain.api.token | default('') }}"}}, []string{"api", "pg"}, false},
		{"{{ keychain[workload.which].token }}", nil, true},
		{"{{ keychain }}", nil, true},
		{"{% for keychain in xs %}{{ keychain.a }}{% endfor %}", nil, false},
		{"{{ workload.keychain.a }}", nil, false},
		{"no template keychain.a", nil, false},
		{"{{ broken", nil, false},
	} {
		names, all := KeychainRefs(tc.in)
		require.Equal(t, tc.want, names, "%v", tc.in)
		require.Equal(t, tc.all, all, "%v", tc.in)
	}
}
