// Package openapitest checks the cloud's answers against its OpenAPI
// document: which documented operation a request is, and whether an
// answer's status, content type and body are what the document says.
//
// An OpenAPI 3.1 schema is a JSON Schema (draft 2020-12), so the bodies
// are validated with a JSON Schema validator (santhosh-tekuri/jsonschema,
// the one libopenapi-validator builds on), the document itself loaded as
// the schemas' resource so that its $refs resolve.
package openapitest

import (
	"bytes"
	"fmt"
	"mime"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/relaykit/relay/cloud/openapi"
)

// Operation is a documented method and path (OpenAPI form: /a/{id}).
type Operation struct{ Method, Path string }

func (o Operation) String() string { return o.Method + " " + o.Path }

// Doc is the document, loaded, with every response schema compiled.
type Doc struct {
	paths   map[string]map[string]any // path → method (lower case) → operation
	schemas map[string]*jsonschema.Schema
}

const docURL = "mem://openapi.json"

var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// Load reads openapi.Document and compiles every response schema in it: a
// $ref that does not resolve, or a schema that is not one, is an error.
func Load() (*Doc, error) {
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(openapi.Document))
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	root, ok := raw.(map[string]any)
	if !ok || root["openapi"] != "3.1.0" {
		return nil, fmt.Errorf("openapi.json: want an OpenAPI 3.1.0 document")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(docURL, raw); err != nil {
		return nil, err
	}
	d := &Doc{paths: map[string]map[string]any{}, schemas: map[string]*jsonschema.Schema{}}
	paths, _ := root["paths"].(map[string]any)
	ids := map[string]string{}
	for path, item := range paths {
		ops := map[string]any{}
		for _, m := range methods {
			op, ok := item.(map[string]any)[m].(map[string]any)
			if !ok {
				continue
			}
			ops[m] = op
			where := strings.ToUpper(m) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] != "" {
				return nil, fmt.Errorf("%s: want an operationId of its own (%q)", where, id)
			}
			ids[id] = where
			if s, _ := op["summary"].(string); s == "" {
				return nil, fmt.Errorf("%s: want a summary", where)
			}
			responses, _ := op["responses"].(map[string]any)
			if len(responses) == 0 {
				return nil, fmt.Errorf("%s: no responses", where)
			}
			for status, r := range responses {
				content, _ := r.(map[string]any)["content"].(map[string]any)
				for ct := range content {
					ptr := "#/paths/" + escape(path) + "/" + m + "/responses/" + status + "/content/" + escape(ct) + "/schema"
					sch, err := c.Compile(docURL + ptr)
					if err != nil {
						return nil, fmt.Errorf("%s %s %s: %w", where, status, ct, err)
					}
					d.schemas[ptr] = sch
				}
			}
		}
		d.paths[path] = ops
	}
	return d, nil
}

// escape is a JSON pointer token.
func escape(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }

// Operations lists every documented operation, sorted.
func (d *Doc) Operations() []Operation {
	var out []Operation
	for path, ops := range d.paths {
		for m := range ops {
			out = append(out, Operation{strings.ToUpper(m), path})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// FromGin is a gin route's path in OpenAPI form: /a/:id → /a/{id}.
func FromGin(path string) string { return ginParam.ReplaceAllString(path, "{$1}") }

// Match finds the operation a request is: the documented path whose
// segments match the request's (a {param} matches any one non-empty
// segment), the one with most literal segments first, as the router picks.
func (d *Doc) Match(method, urlPath string) (Operation, bool) {
	segs := strings.Split(strings.Trim(urlPath, "/"), "/")
	best, bestLit := "", -1
	for path, ops := range d.paths {
		if _, ok := ops[strings.ToLower(method)]; !ok {
			continue
		}
		ps := strings.Split(strings.Trim(path, "/"), "/")
		if len(ps) != len(segs) {
			continue
		}
		lit, ok := 0, true
		for i, p := range ps {
			switch {
			case strings.HasPrefix(p, "{"):
				ok = ok && segs[i] != ""
			case p == segs[i]:
				lit++
			default:
				ok = false
			}
		}
		if ok && lit > bestLit {
			best, bestLit = path, lit
		}
	}
	return Operation{strings.ToUpper(method), best}, best != ""
}

// ValidateResponse checks an answer against op's documented responses:
// its status is documented (or a default is), its content type is one the
// status documents (or it has no body where none is documented), and a
// JSON body validates against the schema.
func (d *Doc) ValidateResponse(op Operation, status int, contentType string, body []byte) error {
	m := strings.ToLower(op.Method)
	o, ok := d.paths[op.Path][m].(map[string]any)
	if !ok {
		return fmt.Errorf("%s is not documented", op)
	}
	responses := o["responses"].(map[string]any)
	code := strconv.Itoa(status)
	r, ok := responses[code].(map[string]any)
	if !ok {
		if r, ok = responses["default"].(map[string]any); !ok {
			return fmt.Errorf("%s answered %d, which is not documented", op, status)
		}
		code = "default"
	}
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		if len(bytes.TrimSpace(body)) > 0 {
			return fmt.Errorf("%s %d: a body where none is documented: %.200s", op, status, body)
		}
		return nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return fmt.Errorf("%s %d: content type %q: %w", op, status, contentType, err)
	}
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s %d: content type %s is not documented", op, status, mt)
	}
	sch := d.schemas["#/paths/"+escape(op.Path)+"/"+m+"/responses/"+code+"/content/"+escape(mt)+"/schema"]
	var v any = string(body)
	if mt == "application/json" {
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("%s %d: not JSON: %w: %.200s", op, status, err, body)
		}
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s %d: the body does not match the document: %v\n%.500s", op, status, err, body)
	}
	return nil
}
