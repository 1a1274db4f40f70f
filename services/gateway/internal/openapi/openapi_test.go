package openapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/gen"
)

func TestDocumentKeepsOnlyWhatThePublicAPIReaches(t *testing.T) {
	t.Parallel()
	var raw struct {
		Definitions map[string]any `json:"definitions"`
		Tags        []any          `json:"tags"`
	}
	require.NoError(t, json.Unmarshal(gen.OpenAPI, &raw))
	out, err := Document(gen.OpenAPI, "")
	require.NoError(t, err)
	var doc struct {
		Info        map[string]string `json:"info"`
		Definitions map[string]any    `json:"definitions"`
		Tags        []map[string]any  `json:"tags"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Equal(t, "devel", doc.Info["version"], "no version given")
	require.Less(t, len(doc.Definitions), len(raw.Definitions), "the internal services' messages are dropped")
	require.Contains(t, doc.Definitions, "rpcStatus")
	require.Contains(t, doc.Definitions, "protobufAny", "reached through rpcStatus")
	require.Contains(t, doc.Definitions, "noetlApiV1Trigger")
	require.Less(t, len(doc.Tags), len(raw.Tags))
	for _, tag := range doc.Tags {
		require.NotEqual(t, "StateService", tag["name"])
	}

	_, err = Document([]byte("{"), "v1")
	require.ErrorContains(t, err, "openapi: the generated document")
}

func TestVersionIsNeverEmpty(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, Version())
}
