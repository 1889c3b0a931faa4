package summary

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/relaykit/relay/shared"
)

// Real GitHub payloads decode as json.Unmarshal decodes them.
func TestDecodeGitHubPayloads(t *testing.T) {
	for _, name := range githubFixtures(t) {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var got, want githubPayload
		if !decodeGitHub(body, &got) || json.Unmarshal(body, &want) != nil {
			t.Fatalf("%s: does not decode", name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ndecodeGitHub %+v\njson.Unmarshal %+v", name, got, want)
		}
	}
}

func githubFixtures(t testing.TB) []string {
	files, err := filepath.Glob("testdata/github/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no GitHub payloads in testdata/github (%v)", err)
	}
	return files
}

// BenchmarkOfGitHub summarises each real GitHub payload.
func BenchmarkOfGitHub(b *testing.B) {
	for _, name := range githubFixtures(b) {
		body, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		w := shared.Webhook{Source: "github", EventType: "pull_request", RawBody: body}
		b.Run(filepath.Base(name), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				Of(w, GitHub)
			}
		})
	}
}

// FuzzDecodeGitHub: on every valid JSON body whose objects repeat no member
// name, decodeGitHub fills the payload exactly as json.Unmarshal does, and
// fails where it fails.
func FuzzDecodeGitHub(f *testing.F) {
	for _, s := range []string{`null`, ` null `, `[]`, `"x"`, `{}`, `{"repository":"x"}`, `{"sender":null}`,
		`{"pull_request":{"head":null,"number":7}}`, `{"pull_request":{"head":[]}}`, `{"Pull_Request":{"Number":1}}`,
		`{"check_run":{"pull_requests":[],"check_suite":{"pull_requests":[null,{"number":3}]}}}`,
		`{"check_suite":{"pull_requests":[1]}}`, `{"workflow_run":{"pull_requests":{}}}`, `{"issue":{"number":"5","html_url":null}}`,
		`{"repository":{"full_name":"a\u002fb"},"number":-0.5e1,"after":"0000"}`,
		`{"action":"opened","number":2,"pull_request":{"number":2,"html_url":"https://x","head":{"ref":"b","sha":"c"}},"repository":{"full_name":"o/r"},"sender":{"login":"u"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got githubPayload
		ok := decodeGitHub(body, &got)
		if !json.Valid(body) || repeatsNames(body) {
			return // no promise beyond not panicking
		}
		var want githubPayload
		wantOK := json.Unmarshal(body, &want) == nil
		if ok != wantOK {
			t.Fatalf("%q: decodeGitHub ok = %v, json.Unmarshal ok = %v", body, ok, wantOK)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\ndecodeGitHub %+v\njson.Unmarshal %+v", body, got, want)
		}
	})
}

// repeatsNames reports whether some object of the valid JSON b names a
// member twice (as decoding into a struct matches names: folding case).
func repeatsNames(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	type frame struct {
		object bool
		names  []string
		key    bool // the next string token is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, isName := tok.(string); isName && top != nil && top.object && top.key {
			for _, n := range top.names {
				if strings.EqualFold(n, name) {
					return true
				}
			}
			top.names = append(top.names, name)
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object's next token is a name.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}
