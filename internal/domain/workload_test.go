package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMergeWorkload(t *testing.T) {
	base := map[string]any{"a": 1, "db": map[string]any{"host": "h", "port": 5432}, "tags": []any{"x"}}
	over := map[string]any{"b": 2, "db": map[string]any{"port": 6543}, "tags": []any{"y"}}
	got := MergeWorkload(base, over)
	require.Equal(t, map[string]any{"a": 1, "b": 2, "db": map[string]any{"host": "h", "port": 6543}, "tags": []any{"y"}}, got,
		"objects merge key by key; anything else is replaced")
	require.Equal(t, map[string]any{"host": "h", "port": 5432}, base["db"], "the base is not changed")
	require.Equal(t, map[string]any{"x": 1}, MergeWorkload(map[string]any{"x": map[string]any{"deep": true}}, map[string]any{"x": 1}),
		"a non-object replaces an object")
	require.Empty(t, MergeWorkload(nil, nil))
}
