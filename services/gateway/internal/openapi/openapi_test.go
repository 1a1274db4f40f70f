package openapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noetl/noetl/gen"
)

// TestDocumentKeepsOnlyWhatThePublicAPIReaches: gen/ documents only noetl.api.v1 (the
// openapiv2 plugin's types in buf.gen.yaml), and Document drops any definition or tag no
// route reaches.
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
	require.LessOrEqual(t, len(doc.Definitions), len(raw.Definitions))
	require.Contains(t, doc.Definitions, "rpcStatus")
	require.Contains(t, doc.Definitions, "protobufAny", "reached through rpcStatus")
	require.Contains(t, doc.Definitions, "v1Trigger")
	require.LessOrEqual(t, len(doc.Tags), len(raw.Tags))
	for _, tag := range doc.Tags {
		require.NotEqual(t, "StateService", tag["name"])
	}

	// A definition and a tag no route reaches are dropped.
	var extra map[string]any
	require.NoError(t, json.Unmarshal(gen.OpenAPI, &extra))
	extra["definitions"].(map[string]any)["v1Orphan"] = map[string]any{"type": "object"}
	extra["tags"] = append(extra["tags"].([]any), map[string]any{"name": "OrphanService"})
	b, err := json.Marshal(extra)
	require.NoError(t, err)
	out, err = Document(b, "v1")
	require.NoError(t, err)
	require.NotContains(t, string(out), "v1Orphan")
	require.NotContains(t, string(out), "OrphanService")

	_, err = Document([]byte("{"), "v1")
	require.ErrorContains(t, err, "openapi: the generated document")
}

// TestRawResponsesAreDescribedAsServed: the export route is documented as the file it
// answers and the watches as Server-Sent Events, not as streams of JSON messages.
func TestRawResponsesAreDescribedAsServed(t *testing.T) {
	t.Parallel()
	out, err := Document(gen.OpenAPI, "v1")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string                    `json:"operationId"`
			Produces    []string                  `json:"produces"`
			Responses   map[string]map[string]any `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	export := doc.Paths["/v1/results/{resultId}/export"]["get"]
	require.Equal(t, "ResultService_ExportResult", export.OperationID)
	require.Equal(t, []string{"application/vnd.apache.arrow.stream", "text/csv"}, export.Produces)
	require.Equal(t, map[string]any{"type": "string", "format": "binary"}, export.Responses["200"]["schema"])
	require.Contains(t, export.Responses["404"]["$ref"], "Error404", "its errors are the API's JSON")
	watch := doc.Paths["/v1/executions/{executionId}/events:watch"]["get"]
	require.Equal(t, []string{"text/event-stream"}, watch.Produces)
	require.Contains(t, watch.Responses["200"]["description"], "Server-Sent Events")
	require.NotContains(t, watch.Responses["200"], "schema")
	for id := range rawResponses {
		found := false
		for _, ops := range doc.Paths {
			for _, op := range ops {
				found = found || op.OperationID == id
			}
		}
		require.True(t, found, "%s is an operation of the document", id)
	}
}

func TestVersionIsNeverEmpty(t *testing.T) {
	t.Parallel()
	require.NotEmpty(t, Version())
}
