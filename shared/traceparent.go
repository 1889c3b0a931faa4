package shared

import (
	"crypto/rand"
	"encoding/hex"
)

// HeaderTraceParent is the W3C Trace Context header: the cloud starts a
// trace at intake (or continues the provider's), stores it with the
// delivery among its headers, and the host sends it on to handlers.
const HeaderTraceParent = "traceparent"

// TraceParent is a W3C traceparent: version 00, a trace id, the parent
// span's id and the flags.
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// ParseTraceParent reads a traceparent header value; ok is false for one
// that is malformed, of an unknown version, or with an all-zero id.
func ParseTraceParent(s string) (tp TraceParent, ok bool) {
	// 00-<32 hex>-<16 hex>-<2 hex>
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || (len(s) > 55 && s[55] != '-') {
		return tp, false
	}
	version, err := hex.DecodeString(s[:2])
	if err != nil || version[0] == 0xff || (version[0] == 0 && len(s) != 55) {
		return tp, false
	}
	if !lowerHex(s[3:35]) || !lowerHex(s[36:52]) || !lowerHex(s[53:55]) {
		return tp, false
	}
	_, _ = hex.Decode(tp.TraceID[:], []byte(s[3:35]))
	_, _ = hex.Decode(tp.SpanID[:], []byte(s[36:52]))
	var flags [1]byte
	_, _ = hex.Decode(flags[:], []byte(s[53:55]))
	tp.Flags = flags[0]
	if tp.TraceID == ([16]byte{}) || tp.SpanID == ([8]byte{}) {
		return TraceParent{}, false
	}
	return tp, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewTraceParent starts a new, sampled trace.
func NewTraceParent() TraceParent {
	var tp TraceParent
	_, _ = rand.Read(tp.TraceID[:])
	_, _ = rand.Read(tp.SpanID[:])
	tp.Flags = 1
	return tp
}

// Child is a new span of the same trace, with the same flags.
func (tp TraceParent) Child() TraceParent {
	_, _ = rand.Read(tp.SpanID[:])
	return tp
}

// ContinueTraceParent is a new span under the trace of header (a
// traceparent value) when it is valid, else of a new trace.
func ContinueTraceParent(header string) TraceParent {
	if tp, ok := ParseTraceParent(header); ok {
		return tp.Child()
	}
	return NewTraceParent()
}

// TraceIDOf returns the trace id of a traceparent value, or "" when it is
// not one.
func TraceIDOf(header string) string {
	if tp, ok := ParseTraceParent(header); ok {
		return hex.EncodeToString(tp.TraceID[:])
	}
	return ""
}

// String is the header value.
func (tp TraceParent) String() string {
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, tp.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, tp.SpanID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{tp.Flags})
	return string(b)
}
