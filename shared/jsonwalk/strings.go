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

// plainText: a quoted JSON string whose content means its bytes
// (PlainString).
func plainText(quoted []byte) bool {
	return len(quoted) >= 2 && PlainString(quoted, 0) == len(quoted)-1
}

// PlainString is the index of the quote closing the JSON string that opens
// at b[i] when its content means its bytes — no escapes, no control
// characters (which JSON refuses), valid UTF-8 — or -1 (no string there,
// or one whose content is not its bytes).
func PlainString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if !utf8.Valid(b[i+1 : j]) {
				return -1
			}
			return j
		case c == '\\' || c < 0x20:
			return -1
		}
	}
	return -1
}

// SkipSpace is the index of the first byte at or after b[i] that is not
// JSON white space.
func SkipSpace(b []byte, i int) int { return skipSpace(b, i) }

// offset is where sub, a subslice of b, starts in b.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }
