// Package openapi holds the OpenAPI 3.1 description of every route of the
// cloud's HTTP API, embedded into the binary and served at
// /api/openapi.json. Tests keep it true: this package's validates it
// against the OpenAPI 3.1 schema, cloud/server's checks every route against
// it, and the end-to-end tests validate real answers with its schemas
// (openapitest).
package openapi

import _ "embed"

// Document is openapi.json as stored.
//
//go:embed openapi.json
var Document []byte

// Path is where the cloud serves Document.
const Path = "/api/openapi.json"
