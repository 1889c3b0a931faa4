package verify

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// topMember returns the raw value of the top-level member key of a JSON
// object body (the last one, when a key repeats, as decoding into a map
// would), without decoding or copying the rest.
func topMember(b []byte, key string) (json.RawMessage, bool) {
	var found json.RawMessage
	ok := walkMembers(b, func(name, value []byte) {
		if keyIs(name, key) {
			found = value
		}
	})
	return found, ok && found != nil
}

// topMembers returns every top-level member of a JSON object body, the
// values sharing the body's memory; nil for anything else.
func topMembers(b []byte) fields {
	f := fields{}
	ok := walkMembers(b, func(name, value []byte) {
		if plainName(name) {
			f[string(name[1:len(name)-1])] = value
			return
		}
		var s string
		if json.Unmarshal(name, &s) == nil {
			f[s] = value
		}
	})
	if !ok {
		return nil
	}
	return f
}

// walkMembers calls fn with each top-level member of a JSON object body —
// its quoted name and its raw value — in order, walking the body once and
// tracking strings and nesting only. It reports false, part way or at the
// end, for a body that is not one object, or whose structure breaks.
// Contents of strings and scalars are not validated: the body was verified
// by its signature, and its members only name the event.
func walkMembers(b []byte, fn func(name, value []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end := stringEnd(b, i)
		if end < 0 {
			return false
		}
		name := b[i : end+1]
		i = skipSpace(b, end+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend := valueEnd(b, i)
		if vend < 0 {
			return false
		}
		fn(name, b[i:vend])
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// plainName: a quoted name that means its bytes (no escapes, valid UTF-8).
func plainName(quoted []byte) bool {
	return bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted)
}

// keyIs compares a quoted member name with key, decoding it only when it
// holds escapes.
func keyIs(quoted []byte, key string) bool {
	if plainName(quoted) {
		return string(quoted[1:len(quoted)-1]) == key
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == key
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index of the quote closing the string that opens at i,
// or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// valueEnd is the index just past the value that starts at i, or -1.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		if e := stringEnd(b, i); e >= 0 {
			return e + 1
		}
		return -1
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := stringEnd(b, j)
				if e < 0 {
					return -1
				}
				j = e
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}
