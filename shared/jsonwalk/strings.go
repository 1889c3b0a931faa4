package jsonwalk

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Strings decodes b, a JSON object of strings (a webhook's headers), as
// encoding/json decodes it into a map[string]string: the same map, or an
// error where that gives one; a name given twice keeps its last value.
// Names and values without escapes — every header a provider sends in
// practice — are read without reflection, into substrings of one copy of
// b; anything else is decoded by encoding/json.
func Strings(b []byte) (map[string]string, error) {
	if m, ok := plainStrings(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// plainStrings is Strings' reading of an object whose names and values all
// mean their bytes, or false.
func plainStrings(b []byte) (map[string]string, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	n := bytes.Count(b, []byte{':'}) // at least the members
	s := string(b)                   // one copy for every name and value
	m := make(map[string]string, n)
	ok := true
	walked := Members(b, func(name, value []byte) {
		if !ok {
			return
		}
		if !plainText(name) || !plainText(value) {
			ok = false
			return
		}
		k, v := offset(b, name), offset(b, value)
		m[s[k+1:k+len(name)-1]] = s[v+1 : v+len(value)-1]
	})
	return m, walked && ok
}

// plainText: a JSON string whose content means its bytes — no escapes,
// valid UTF-8, no control characters (which JSON refuses).
func plainText(quoted []byte) bool {
	if len(quoted) < 2 || quoted[0] != '"' {
		return false
	}
	c := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(c, '\\') >= 0 {
		return false
	}
	for _, ch := range c {
		if ch < 0x20 {
			return false
		}
	}
	return utf8.Valid(c)
}

// offset is where sub, a subslice of b, starts in b.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }
