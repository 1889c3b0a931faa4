package openapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi/datamodel"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// oas31 compiles the OpenAPI Initiative's JSON Schema of OpenAPI 3.1
// documents (the 2022-10-07 iteration, as libopenapi embeds it unchanged).
func oas31(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := jsonschema.UnmarshalJSON(strings.NewReader(datamodel.OpenAPI31SchemaData))
	require.NoError(t, err)
	id, _ := raw.(map[string]any)["$id"].(string)
	require.Equal(t, "https://spec.openapis.org/oas/3.1/schema/2022-10-07", id, "the official schema, by its $id")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource(id, raw))
	s, err := c.Compile(id)
	require.NoError(t, err)
	return s
}

// TestDocumentIsOpenAPI31: the whole document passes the OpenAPI 3.1
// schema, as an independent validator checks it, and not only the answers
// checked against it elsewhere.
func TestDocumentIsOpenAPI31(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Document))
	require.NoError(t, err)
	require.NoError(t, oas31(t).Validate(doc))
}

// TestOpenAPI31SchemaRefuses: the schema used above does refuse what 3.1
// does not allow, such as a description on a Media Type Object.
func TestOpenAPI31SchemaRefuses(t *testing.T) {
	s := oas31(t)
	doc := func(media string) any {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
			"paths": {"/a": {"get": {"responses": {"200": {"description": "ok", "content": {"text/xml": ` + media + `}}}}}}}`))
		require.NoError(t, err)
		return v
	}
	require.NoError(t, s.Validate(doc(`{"schema": {"type": "string", "description": "TwiML"}}`)))
	err := s.Validate(doc(`{"schema": {"type": "string"}, "description": "TwiML"}`))
	require.Error(t, err)
	require.Contains(t, err.Error(), "description")
}
