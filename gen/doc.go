// Package gen holds the code generated from proto/ by buf (never edit it by hand) and
// embeds the merged OpenAPI document of the public API.
package gen

import _ "embed"

// OpenAPI is the OpenAPI v2 document of the public REST API.
//
//go:embed openapiv2/noetl.swagger.json
var OpenAPI []byte
