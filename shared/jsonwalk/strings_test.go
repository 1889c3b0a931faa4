package jsonwalk

import (
	"encoding/json"
	"maps"
	"testing"
)

// FuzzStrings: Strings gives what encoding/json gives for a map[string]string,
// error for error.
func FuzzStrings(f *testing.F) {
	for _, s := range []string{`{"Content-Type":"application/json","X-GitHub-Event":"push"}`, `{}`, ` { "a" : "b" } `,
		`{"a":"1","a":"2"}`, `{"a":"x\"y"}`, `{"a":"\u00e9"}`, `{"a\u0041":"b"}`, `{"a":1}`, `{"a":null}`, `null`,
		`[]`, `{"a":"b",}`, `{"a":"b"} x`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", `{"a":"<&>"}`, `{"straße":"ü"}`,
		`{"a":"b"`, `"a"`, ``, `{"a":{"b":"c"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Strings(b)
		var want map[string]string
		wantErr := json.Unmarshal(b, &want)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: Strings error %v, encoding/json error %v", b, err, wantErr)
		}
		if err != nil {
			return
		}
		if (got == nil) != (want == nil) || !maps.Equal(got, want) {
			t.Fatalf("%q: Strings = %#v, encoding/json = %#v", b, got, want)
		}
	})
}

// The plain path is the one headers take: no copy per name or value.
func TestStringsReadsPlainHeadersWithoutReflection(t *testing.T) {
	b := []byte(`{"Content-Type":"application/json","X-Hub-Signature-256":"sha256=ab","X-GitHub-Event":"push"}`)
	if _, ok := plainStrings(b); !ok {
		t.Fatal("plain headers were not read by the plain path")
	}
	allocs := testing.AllocsPerRun(100, func() { Strings(b) })
	if allocs > 3 { // the copy, the map and its table
		t.Fatalf("Strings allocated %v times for three plain headers", allocs)
	}
}

func BenchmarkStrings(b *testing.B) {
	h := []byte(`{"Accept":"*/*","Content-Type":"application/json","User-Agent":"GitHub-Hookshot/a1b2c3d",` +
		`"X-GitHub-Delivery":"0b3f0f9e-8a4e-11ef-9e33-2d1f3c2b1a00","X-GitHub-Event":"installation",` +
		`"X-GitHub-Hook-ID":"512345678","X-GitHub-Hook-Installation-Target-ID":"1234567",` +
		`"X-GitHub-Hook-Installation-Target-Type":"integration","X-Hub-Signature":"sha1=0123456789abcdef0123456789abcdef01234567",` +
		`"X-Hub-Signature-256":"sha256=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)
	b.Run("jsonwalk", func(b *testing.B) {
		for b.Loop() {
			Strings(h)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var m map[string]string
			json.Unmarshal(h, &m)
		}
	})
}
