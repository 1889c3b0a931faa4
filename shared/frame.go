package shared

import (
	"encoding/json"
	"math"

	"github.com/relaykit/relay/shared/jsonwalk"
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
	ok := p.object(func(name string) (bit uint8, ok bool) {
		switch name {
		case "type":
			f.Type, ok = p.str()
			return 1, ok
		case "id":
			f.ID, ok = p.int64()
			return 2, ok
		case "acks":
			f.Acks, ok = array(&p, p.str)
			return 4, ok
		case "extends":
			f.Extends, ok = array(&p, p.str)
			return 8, ok
		case "results":
			f.Results, ok = array(&p, p.result)
			return 16, ok
		case "stopping":
			f.Stopping, ok = p.bool()
			return 32, ok
		}
		return 0, false
	})
	p.space()
	return ok && p.i == len(b)
}

// frameScan reads JSON from b[i:]; s is one copy of b, which the strings
// read share.
type frameScan struct {
	b []byte
	s string
	i int
}

func (p *frameScan) space() { p.i = jsonwalk.SkipSpace(p.b, p.i) }

// next reads the byte c, after space.
func (p *frameScan) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string that means its bytes (jsonwalk.PlainString).
func (p *frameScan) str() (string, bool) {
	p.space()
	end := jsonwalk.PlainString(p.b, p.i)
	if end < 0 {
		return "", false
	}
	s := p.s[p.i+1 : end]
	p.i = end + 1
	return s, true
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

// object reads an object, each member's value by read, which returns the
// member's bit (0: a member not read here) and whether its value read. A
// member given twice is refused.
func (p *frameScan) object(read func(name string) (bit uint8, ok bool)) bool {
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
		bit, ok := read(name)
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

// array reads an array, each element by read (never nil, as encoding/json
// decodes one).
func array[T any](p *frameScan, read func() (T, bool)) ([]T, bool) {
	if !p.next('[') {
		return nil, false
	}
	out := []T{}
	if p.next(']') {
		return out, true
	}
	for {
		v, ok := read()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if p.next(']') {
			return out, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// result reads one result object.
func (p *frameScan) result() (WebhookResult, bool) {
	var r WebhookResult
	ok := p.object(func(name string) (bit uint8, ok bool) {
		switch name {
		case "delivery_id":
			r.DeliveryID, ok = p.str()
			return 1, ok
		case "attempt":
			r.Attempt, ok = p.int()
			return 2, ok
		case "result":
			r.Result, ok = p.str()
			return 4, ok
		case "handler":
			r.Handler, ok = p.str()
			return 8, ok
		case "response_status":
			r.ResponseStatus, ok = p.optInt()
			return 16, ok
		case "exit_code":
			r.ExitCode, ok = p.optInt()
			return 32, ok
		case "duration_ms":
			r.DurationMS, ok = p.int64()
			return 64, ok
		case "error":
			r.Error, ok = p.str()
			return 128, ok
		}
		return 0, false
	})
	return r, ok
}
