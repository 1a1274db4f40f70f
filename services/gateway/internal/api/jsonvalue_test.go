package api

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestJSONValueIsProtojsonsValue: a JSON document becomes the Value protojson makes of it
// (objects, lists, numbers as doubles, escapes, non-ASCII text), text that is not JSON a
// string Value of itself, and nothing no Value.
func TestJSONValueIsProtojsonsValue(t *testing.T) {
	for _, doc := range []string{
		`null`, `true`, `0`, `-1.5e3`, `12345678901234567890`, `"a\"b\\u00e9\n"`, `"étape"`,
		`[]`, `{}`, `[null,null,{"a":[1,2,{"b":null}]}]`, `{"result":{"rows":[{"id":1,"name":"x"}],"ok":true}}`,
		` [1, 2] `,
	} {
		want := &structpb.Value{}
		require.NoError(t, protojson.Unmarshal([]byte(doc), want), doc)
		require.True(t, proto.Equal(want, jsonValue([]byte(doc))), "%s: %v", doc, jsonValue([]byte(doc)))
	}
	for _, text := range []string{`not json`, `{"a":`, `[1] [2]`, `NaN`} {
		require.True(t, proto.Equal(structpb.NewStringValue(text), jsonValue([]byte(text))), text)
	}
	require.Nil(t, jsonValue(nil))
}
