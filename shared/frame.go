package shared

import (
	"encoding/json"
	"math"
	"unicode/utf8"
)

// UnmarshalFrame decodes a frame's JSON into f as json.Unmarshal(b, f)
// does: the same frame, or an error where that gives one. A report of
// acks, extends and results, the frame a draining host sends for every
// batch (an ack and a result per delivery), is read without reflection
// when it holds those members only, each once and spelled as sent, with
// strings that mean their bytes and integers; any other frame, or anything
// unusual in one, is decoded by encoding/json.
func UnmarshalFrame(b []byte, f *Frame) error {
	before := *f
	if plainReport(b, f) {
		return nil
	}
	*f = before
	return json.Unmarshal(b, f)
}

// plainReport is UnmarshalFrame's reading of a plain report into f, or
// false (f then partly written).
func plainReport(b []byte, f *Frame) bool {
	p := frameScan{b: b, s: string(b)}
	if !p.next('{') {
		return false
	}
	if !p.next('}') {
		var seen uint8
		for {
			name, ok := p.str()
			if !ok || !p.next(':') {
				return false
			}
			var bit uint8
			switch name {
			case "type":
				bit = 1
				f.Type, ok = p.str()
			case "id":
				bit = 2
				f.ID, ok = p.int64()
			case "acks":
				bit = 4
				f.Acks, ok = p.strs()
			case "extends":
				bit = 8
				f.Extends, ok = p.strs()
			case "results":
				bit = 16
				f.Results, ok = p.results()
			case "stopping":
				bit = 32
				f.Stopping, ok = p.bool()
			}
			if bit == 0 || !ok || seen&bit != 0 {
				return false
			}
			seen |= bit
			if p.next('}') {
				break
			}
			if !p.next(',') {
				return false
			}
		}
	}
	p.space()
	return p.i == len(b)
}

// frameScan reads JSON from b[i:]; s is one copy of b, which the strings
// read share.
type frameScan struct {
	b []byte
	s string
	i int
}

func (p *frameScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next reads the byte c, after space.
func (p *frameScan) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string that means its bytes: no escape, no control
// character, valid UTF-8.
func (p *frameScan) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			if !utf8.Valid(p.b[start:p.i]) {
				return "", false
			}
			p.i++
			return p.s[start : p.i-1], true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// int64 reads an integer as JSON writes one: no fraction, no exponent, at
// most 18 digits (longer ones are encoding/json's to judge).
func (p *frameScan) int64() (int64, bool) {
	p.space()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	start := p.i
	var n int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 18 || (p.b[start] == '0' && digits > 1) {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// int reads an integer as int64 does, that fits an int.
func (p *frameScan) int() (int, bool) {
	n, ok := p.int64()
	return int(n), ok && n >= math.MinInt && n <= math.MaxInt
}

// optInt reads an integer or null.
func (p *frameScan) optInt() (*int, bool) {
	if p.literal("null") {
		return nil, true
	}
	n, ok := p.int()
	return &n, ok
}

func (p *frameScan) bool() (bool, bool) {
	if p.literal("true") {
		return true, true
	}
	return false, p.literal("false")
}

// literal reads word (true, false, null) when it is the next token.
func (p *frameScan) literal(word string) bool {
	p.space()
	end := p.i + len(word)
	if end > len(p.b) || string(p.b[p.i:end]) != word {
		return false
	}
	if end < len(p.b) {
		switch c := p.b[end]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			return false
		}
	}
	p.i = end
	return true
}

// strs reads an array of strings (never nil, as encoding/json's).
func (p *frameScan) strs() ([]string, bool) {
	if !p.next('[') {
		return nil, false
	}
	out := []string{}
	if p.next(']') {
		return out, true
	}
	for {
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if p.next(']') {
			return out, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// results reads an array of results.
func (p *frameScan) results() ([]WebhookResult, bool) {
	if !p.next('[') {
		return nil, false
	}
	out := []WebhookResult{}
	if p.next(']') {
		return out, true
	}
	for {
		var r WebhookResult
		if !p.result(&r) {
			return nil, false
		}
		out = append(out, r)
		if p.next(']') {
			return out, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// result reads one result object.
func (p *frameScan) result(r *WebhookResult) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	var seen uint8
	for {
		name, ok := p.str()
		if !ok || !p.next(':') {
			return false
		}
		var bit uint8
		switch name {
		case "delivery_id":
			bit = 1
			r.DeliveryID, ok = p.str()
		case "attempt":
			bit = 2
			r.Attempt, ok = p.int()
		case "result":
			bit = 4
			r.Result, ok = p.str()
		case "handler":
			bit = 8
			r.Handler, ok = p.str()
		case "response_status":
			bit = 16
			r.ResponseStatus, ok = p.optInt()
		case "exit_code":
			bit = 32
			r.ExitCode, ok = p.optInt()
		case "duration_ms":
			bit = 64
			r.DurationMS, ok = p.int64()
		case "error":
			bit = 128
			r.Error, ok = p.str()
		}
		if bit == 0 || !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}
