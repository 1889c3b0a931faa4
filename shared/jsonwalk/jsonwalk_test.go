package jsonwalk

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

var keys = []string{"action", "number", "k", "straße"}

// decoded is what encoding/json finds for keys, decoding b into a struct
// with a json.RawMessage field tagged with each key.
func decoded(t *testing.T, b []byte) ([][]byte, bool) {
	fields := make([]reflect.StructField, len(keys))
	for i, k := range keys {
		fields[i] = reflect.StructField{Name: "F" + string(rune('A'+i)), Type: reflect.TypeFor[json.RawMessage](),
			Tag: reflect.StructTag(`json:"` + k + `"`)}
	}
	v := reflect.New(reflect.StructOf(fields))
	if json.Unmarshal(b, v.Interface()) != nil {
		return nil, false
	}
	out := make([][]byte, len(keys))
	for i := range keys {
		if raw := v.Elem().Field(i).Bytes(); raw != nil {
			out[i] = raw
		}
	}
	return out, true
}

// FuzzWalk: on every valid JSON object, Member and Members find what
// decoding into a map finds, and Fields what decoding into a struct finds.
func FuzzWalk(f *testing.F) {
	for _, s := range []string{`{"action":"opened","x":[1,{"action":2}]}`, `{"a":"\"}","action" : "x\u0041" }`,
		`{"action":1,"action":"last"}`, `{"act\u0069on":true}`, `[]`, `{}`, ` {"b":null} `, `"action"`,
		`{"ACTION":"a","Action":"b"}`, `{"K":1}`, `{"\u212a":2}`, `{"STRASSE":1,"STRAẞE":2}`, `{"number":null}`,
		`{"number":1,"NUMBER":2}`, `{"action":{"number":[{"k":"v"}]},"number":-1.5e3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		values := make([][]byte, len(keys))
		found := Fields(b, keys, values)
		got, ok := Member(b, "action")
		if !json.Valid(b) {
			return // no promise beyond not panicking
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil || m == nil {
			if ok || found {
				t.Fatalf("%q is no object, but Member found %q / Fields %v", b, got, found)
			}
			return
		}
		want, has := m["action"]
		if ok != has || (has && !bytes.Equal(got, want)) {
			t.Fatalf("%q: Member = %q, %v; decoding = %q, %v", b, got, ok, want, has)
		}
		all := map[string][]byte{}
		if !Members(b, func(name, value []byte) {
			if s, ok := Name(name); ok {
				all[s] = value
			}
		}) || len(all) != len(m) {
			t.Fatalf("%q: Members = %q; decoding = %q", b, all, m)
		}
		for k, v := range m {
			if !bytes.Equal(all[k], v) {
				t.Fatalf("%q: member %q: Members = %q; decoding = %q", b, k, all[k], v)
			}
		}
		wantFields, _ := decoded(t, b)
		if !found {
			t.Fatalf("%q: Fields found no object", b)
		}
		for i, k := range keys {
			if !bytes.Equal(values[i], wantFields[i]) || (values[i] == nil) != (wantFields[i] == nil) {
				t.Fatalf("%q: field %q: Fields = %q; decoding = %q", b, k, values[i], wantFields[i])
			}
		}
	})
}

func TestRepeatsNames(t *testing.T) {
	for body, want := range map[string]bool{
		`{}`: false, `[]`: false, `1`: false, `{"a":1,"b":{"a":2}}`: false, `[{"a":1},{"a":2}]`: false,
		`{"a":1,"a":2}`: true, `{"a":1,"A":2}`: true, `{"k":1,"\u212a":2}`: true, `{"x":[{"b":1,"B":1}]}`: true,
		`{"x":{"y":{"z":1,"z":1}}}`: true, `{"a\u0062":1,"ab":2}`: true,
	} {
		if got := RepeatsNames([]byte(body)); got != want {
			t.Errorf("RepeatsNames(%s) = %v, want %v", body, got, want)
		}
	}
}

// FieldsAt reads an object within a larger value, hands the members it
// finds to nested in the same pass, and returns where the object ends.
func TestFieldsAt(t *testing.T) {
	b := []byte(`[1, {"action": {"number": 7, "k": "x"}, "other": {"action": 1}, "number": [2]} , 3]`)
	i := bytes.IndexByte(b, '{')
	var top, inner [2][]byte
	var met []int
	end := FieldsAt(b, i, []string{"action", "number"}, top[:], func(k int, b []byte, i int) int {
		met = append(met, k)
		if k == 0 {
			return FieldsAt(b, i, []string{"number", "k"}, inner[:], nil)
		}
		return End(b, i)
	})
	if want := bytes.LastIndexByte(b, '}') + 1; end != want {
		t.Fatalf("end %d, want %d", end, want)
	}
	if string(top[0]) != `{"number": 7, "k": "x"}` || string(top[1]) != `[2]` || string(inner[0]) != `7` || string(inner[1]) != `"x"` {
		t.Fatalf("top %q, inner %q", top, inner)
	}
	if !reflect.DeepEqual(met, []int{0, 1}) {
		t.Fatalf("nested met %v, want [0 1]", met)
	}
	// A broken object within: no end, no values.
	if end := FieldsAt([]byte(`{"action": {"number" 7}}`), 0, []string{"action"}, top[:1], func(k int, b []byte, i int) int {
		return FieldsAt(b, i, []string{"number"}, inner[:1], nil)
	}); end != -1 || top[0] != nil {
		t.Fatalf("broken: end %d, values %q", end, top[:1])
	}
}
