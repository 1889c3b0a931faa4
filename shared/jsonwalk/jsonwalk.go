// Package jsonwalk reads members of a JSON object in one pass over its bytes,
// tracking strings and nesting only: a webhook body is read for the few
// identifiers that name its event or summarise it, not decoded whole. Values
// are returned as raw JSON sharing the body's memory.
package jsonwalk

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Members calls fn with each member of the JSON object b — its quoted name
// and its raw value — in order. It reports false, part way or at the end,
// for b that is not one object, or whose structure breaks. Strings and
// scalars are not validated beyond their extent.
func Members(b []byte, fn func(name, value []byte)) bool {
	end := membersAt(b, skipSpace(b, 0), func(name []byte, i int) int {
		vend := valueEnd(b, i)
		if vend >= 0 {
			fn(name, b[i:vend])
		}
		return vend
	})
	return end >= 0 && skipSpace(b, end) == len(b)
}

// membersAt walks the object that starts at b[i]: value is called with each
// member's quoted name and the index where its value starts, and returns
// the index just past that value (-1: it is broken). membersAt returns the
// index just past the object, or -1 for no object or a broken one.
func membersAt(b []byte, i int, value func(name []byte, i int) int) int {
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		end := stringEnd(b, i)
		if end < 0 {
			return -1
		}
		name := b[i : end+1]
		i = skipSpace(b, end+1)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		vend := value(name, skipSpace(b, i+1))
		if vend < 0 {
			return -1
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return -1
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// Elements calls fn with each element of the JSON array b, in order. It
// reports false, part way or at the end, for b that is not one array, or
// whose structure breaks.
func Elements(b []byte, fn func(value []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		end := valueEnd(b, i)
		if end < 0 {
			return false
		}
		fn(b[i:end])
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

// Member returns the raw value of the member named exactly key (the last,
// when a name repeats, as decoding into a map would).
func Member(b []byte, key string) ([]byte, bool) {
	var found []byte
	ok := Members(b, func(name, value []byte) {
		if NameIs(name, key) {
			found = value
		}
	})
	return found, ok && found != nil
}

// Fields finds several members of the object b in one pass: values[i] is
// the raw value of the member matching keys[i] as decoding into a struct
// would match a field tagged keys[i] — an exact name or one equal under
// case folding, the last such member winning — or nil. It reports false
// for b that is not one object (values are then nil).
func Fields(b []byte, keys []string, values [][]byte) bool {
	end := FieldsAt(b, skipSpace(b, 0), keys, values, nil)
	if end < 0 || skipSpace(b, end) != len(b) {
		clear(values)
		return false
	}
	return true
}

// Nested reads, in the walk of an object, the value of its member matching
// keys[k] that starts at b[i] (an object it walks with FieldsAt, or
// anything it skips with End), and returns the index just past it, or -1
// when it is broken.
type Nested func(k int, b []byte, i int) int

// FieldsAt is Fields for the object that starts at b[i] within b: it
// returns the index just past the object, or -1 for no object or a broken
// one (values are then nil). The values of the members it finds go to
// nested, when not nil, rather than being skipped: a caller reads the
// objects within an object in the same pass over their bytes, instead of
// walking each again once Fields returned it.
func FieldsAt(b []byte, i int, keys []string, values [][]byte, nested Nested) int {
	clear(values)
	end := membersAt(b, i, func(quoted []byte, i int) int {
		// The name is read once, not for each key.
		name, ok := nameOf(quoted)
		if !ok {
			return valueEnd(b, i)
		}
		for k, key := range keys {
			if string(name) == key || strings.EqualFold(string(name), key) {
				var vend int
				if nested != nil {
					vend = nested(k, b, i)
				} else {
					vend = valueEnd(b, i)
				}
				if vend >= 0 {
					values[k] = b[i:vend]
				}
				return vend
			}
		}
		return valueEnd(b, i)
	})
	if end < 0 {
		clear(values)
	}
	return end
}

// End is the index just past the JSON value that starts at b[i] (its
// extent, not validated beyond nesting and strings), or -1.
func End(b []byte, i int) int { return valueEnd(b, i) }

// Name decodes a quoted member name.
func Name(quoted []byte) (string, bool) {
	if plain(quoted) {
		return string(quoted[1 : len(quoted)-1]), true
	}
	var s string
	if json.Unmarshal(quoted, &s) != nil {
		return "", false
	}
	return s, true
}

// NameIs compares a quoted member name with key, decoding it only when it
// holds escapes.
func NameIs(quoted []byte, key string) bool {
	if plain(quoted) {
		return string(quoted[1:len(quoted)-1]) == key
	}
	s, ok := Name(quoted)
	return ok && s == key
}

// nameOf is a quoted member name: its bytes when they mean themselves,
// else decoded; false when it does not decode.
func nameOf(quoted []byte) ([]byte, bool) {
	if plain(quoted) {
		return quoted[1 : len(quoted)-1], true
	}
	s, ok := Name(quoted)
	return []byte(s), ok
}

// plain: a quoted name that means its bytes (no escapes, valid UTF-8).
func plain(quoted []byte) bool {
	return bytes.IndexByte(quoted, '\\') < 0 && utf8.Valid(quoted)
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
	j := i + 1
	for j < len(b) {
		// The next quote, found a word at a time; it closes the string
		// unless a backslash before it escapes it.
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return -1
		}
		e := bytes.IndexByte(b[j:j+q], '\\')
		if e < 0 {
			return j + q
		}
		j += e + 2 // past the backslash and the byte it escapes
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

// RepeatsNames reports whether some object within the JSON value b names a
// member twice, names compared as encoding/json matches them to struct
// fields (folding case). Where a name repeats, decoding merges or replaces
// what a walk reads once; decoders built on this package differ from
// encoding/json there, and their tests leave such bodies out.
func RepeatsNames(b []byte) bool {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return false
	}
	repeats := false
	switch b[i] {
	case '{':
		var names []string
		Members(b, func(name, value []byte) {
			s, _ := Name(name)
			for _, n := range names {
				if strings.EqualFold(n, s) {
					repeats = true
				}
			}
			names = append(names, s)
			repeats = repeats || RepeatsNames(value)
		})
	case '[':
		Elements(b, func(value []byte) { repeats = repeats || RepeatsNames(value) })
	}
	return repeats
}
