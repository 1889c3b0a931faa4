package shared

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// DescribeJSONError says what is wrong with a request body in the API's own
// terms — the field and the kind of value it takes, or where the JSON is
// malformed — and never in the decoder's, which names Go types and struct
// fields ("cannot unmarshal string into Go struct field …").
func DescribeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		want := jsonKind(typeErr.Type)
		got := typeErr.Value
		if n, ok := strings.CutPrefix(got, "number "); ok {
			got = "the number " + clip(n, 24)
			f, _ := strconv.ParseFloat(n, 64) // ±Inf past float64's range
			if want == "a number" || (want == "a whole number" && f == math.Trunc(f)) {
				want += " in range"
			}
		}
		if typeErr.Field == "" {
			return fmt.Sprintf("request body: want %s, got %s", want, got)
		}
		return fmt.Sprintf("field %q: want %s, got %s", clip(typeErr.Field, 64), want, got)
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the body ends before the value does"
	}
	// Other decoder errors name no type; still, only the message is told.
	return "malformed JSON: " + clip(strings.TrimPrefix(err.Error(), "json: "), 200)
}

// jsonKind names the JSON value a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value of another kind"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value of another kind"
}

// clip cuts what a client sent to n bytes for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
