package jsonwalk

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzAppendString: a string is written as encoding/json writes it
// (without HTML escaping), byte for byte.
//
//	go test -run '^$' -fuzz FuzzAppendString -fuzztime 30s ./shared/jsonwalk/
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "é\"\\\n\r\t\b\f\x00\x1f<&>", "\u2028\u2029", "\xff\xc3(", "🚀", "a\x7fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got, w := string(AppendString(nil, s)), strings.TrimSuffix(want.String(), "\n"); got != w {
			t.Fatalf("%q: wrote %s, encoding/json %s", s, got, w)
		}
	})
}

func TestInts(t *testing.T) {
	for want, vs := range map[string][]int64{"[]": nil, "[7]": {7}, "[1,-2,9223372036854775807]": {1, -2, 9223372036854775807}} {
		if got := Ints(vs); got != want {
			t.Errorf("Ints(%v) = %s, want %s", vs, got, want)
		}
		var back []int64
		if err := json.Unmarshal([]byte(Ints(vs)), &back); err != nil || len(back) != len(vs) {
			t.Errorf("Ints(%v) does not decode as its numbers: %v", vs, err)
		}
	}
}
