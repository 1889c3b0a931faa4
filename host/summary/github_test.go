package summary

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/jsonwalk"
)

// Real GitHub payloads decode as json.Unmarshal decodes them.
func TestDecodeGitHubPayloads(t *testing.T) {
	decodesAsUnmarshal(t, fixtures(t, "github"), decodeGitHub)
}

// fixtures are the real payloads in testdata/dir.
func fixtures(t testing.TB, dir string) []string {
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no payloads in testdata/%s (%v)", dir, err)
	}
	return files
}

// decodesAsUnmarshal checks that decode reads each file as json.Unmarshal
// reads it.
func decodesAsUnmarshal[T any](t *testing.T, files []string, decode func([]byte, *T) bool) {
	t.Helper()
	for _, name := range files {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var got, want T
		if !decode(body, &got) || json.Unmarshal(body, &want) != nil {
			t.Fatalf("%s: does not decode", name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ndecoded %+v\njson.Unmarshal %+v", name, got, want)
		}
	}
}

// BenchmarkOfGitHub summarises each real GitHub payload.
func BenchmarkOfGitHub(b *testing.B) {
	for _, name := range fixtures(b, "github") {
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
	f.Fuzz(func(t *testing.T, body []byte) { decodesAsUnmarshalFuzz(t, body, decodeGitHub) })
}

// decodesAsUnmarshalFuzz checks that decode reads body as json.Unmarshal
// does, and fails where it fails, for JSON that repeats no member name
// (beyond that, only that it does not panic).
func decodesAsUnmarshalFuzz[T any](t *testing.T, body []byte, decode func([]byte, *T) bool) {
	var got T
	ok := decode(body, &got)
	if !json.Valid(body) || jsonwalk.RepeatsNames(body) {
		return
	}
	var want T
	wantOK := json.Unmarshal(body, &want) == nil
	if ok != wantOK {
		t.Fatalf("%q: decoded ok = %v, json.Unmarshal ok = %v", body, ok, wantOK)
	}
	if ok && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\ndecoded %+v\njson.Unmarshal %+v", body, got, want)
	}
}
