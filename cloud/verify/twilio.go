package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// twilio verifies X-Twilio-Signature: the base64 HMAC-SHA1, keyed with the
// account's Auth Token, of the full public URL Twilio requested followed by
// the form parameters, sorted by name (byte-wise), each as name+value
// (percent-decoded, no separators; a repeated name gives each of its values,
// sorted). JSON bodies are signed differently: Twilio adds
// bodySHA256=<hex sha256 of the body> to the URL and signs the URL alone, so
// the body must also match that hash. Any other non-empty body is refused,
// since nothing would vouch for it.
//
// The URL is the relay's public one (Request.URL, built from
// RELAY_PUBLIC_URL, never from Host). Twilio is inconsistent about ports, so
// the URL is also tried with the scheme's default port added, or with its
// explicit port removed. Repeated identical values are also tried once each
// (twilio-node de-duplicates them).
//
// Event: id I-Twilio-Idempotency-Token, else MessageSid:MessageStatus or
// CallSid:CallStatus; type the EventType parameter, else "message" or
// "call", with the status as action.
type twilio struct{ profile }

func (twilio) Verify(r *Request, secrets [][]byte, _ map[string]string) error {
	want, err := signature("X-Twilio-Signature", r.Header.Get("X-Twilio-Signature"), "base64", 20)
	if err != nil {
		return err
	}
	if r.URL == "" {
		return fmt.Errorf("twilio signs the public URL: %w", ErrNoURL)
	}
	u, err := url.Parse(r.URL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("public URL is not an absolute http(s) URL: %w", ErrNoURL)
	}
	urls := twilioURLs(r.URL)

	var signed []string
	bodyOK := true
	if q := u.Query(); q.Has("bodySHA256") {
		declared, ok := decodeHex(q.Get("bodySHA256"), 32)
		if !ok {
			return fmt.Errorf("bodySHA256 is not 32 bytes of hex: %w", ErrMalformed)
		}
		sum := sha256.Sum256(r.Body)
		bodyOK = hmac.Equal(sum[:], declared)
		signed = urls
	} else {
		var params []string
		switch {
		case isForm(r.Header):
			form, err := url.ParseQuery(string(r.Body))
			if err != nil {
				return fmt.Errorf("form body does not parse: %w", ErrMalformed)
			}
			params = twilioParams(form)
		case len(r.Body) == 0:
			params = []string{""}
		default:
			return fmt.Errorf("body is neither a form nor covered by bodySHA256: %w", ErrMismatch)
		}
		for _, base := range urls {
			for _, p := range params {
				signed = append(signed, base+p)
			}
		}
	}
	err = anySecret(secrets, func(s []byte) bool {
		ok := false
		for _, data := range signed {
			if hmac.Equal(hmacSHA1(s, []byte(data)), want) {
				ok = true
			}
		}
		return ok
	})
	if err != nil {
		return err
	}
	if !bodyOK {
		return fmt.Errorf("body does not match bodySHA256: %w", ErrMismatch)
	}
	return nil
}

// twilioURLs lists the URL forms Twilio may have signed: the URL as given,
// then the same with the scheme's default port added (when it has no port)
// or with its port removed (when it has one). The bytes are kept as they
// are, never re-encoded.
func twilioURLs(raw string) []string {
	urls := []string{raw}
	i := strings.Index(raw, "://")
	if i < 0 {
		return urls
	}
	start := i + 3
	end := len(raw)
	if j := strings.IndexAny(raw[start:], "/?#"); j >= 0 {
		end = start + j
	}
	hostStart := start
	if at := strings.LastIndexByte(raw[start:end], '@'); at >= 0 {
		hostStart = start + at + 1
	}
	host := raw[hostStart:end]
	colon := strings.LastIndexByte(host, ':')
	if colon >= 0 && strings.IndexByte(host[colon:], ']') >= 0 {
		colon = -1 // a colon inside an IPv6 literal
	}
	if colon >= 0 {
		if port := host[colon+1:]; port != "" {
			if _, ok := parseDigits(port); !ok {
				return urls // not a port: leave the URL alone
			}
		}
		return append(urls, raw[:hostStart+colon]+raw[end:])
	}
	port := map[string]string{"https": ":443", "http": ":80"}[strings.ToLower(raw[:i])]
	if port != "" && host != "" {
		urls = append(urls, raw[:end]+port+raw[end:])
	}
	return urls
}

// twilioParams renders form parameters as Twilio signs them: names sorted
// byte-wise, each value (sorted) appended as name+value. When a name repeats
// a value, the rendering with each value once is offered as well.
func twilioParams(form url.Values) []string {
	names := make([]string, 0, len(form))
	for n := range form {
		names = append(names, n)
	}
	sort.Strings(names)
	var all, once strings.Builder
	repeated := false
	for _, n := range names {
		vals := append([]string(nil), form[n]...)
		sort.Strings(vals)
		for i, v := range vals {
			all.WriteString(n + v)
			if i > 0 && v == vals[i-1] {
				repeated = true
				continue
			}
			once.WriteString(n + v)
		}
	}
	if repeated {
		return []string{all.String(), once.String()}
	}
	return []string{all.String()}
}

func (twilio) Event(r *Request, _ map[string]string) Event {
	id := r.Header.Get("I-Twilio-Idempotency-Token")
	if !isForm(r.Header) {
		return Event{ID: idOrHash(id, r.Body), Type: jsonObject(r.Body).str("type")}
	}
	form := formValues(r.Body)
	var e Event
	switch msg, call := firstOf(form.Get("MessageSid"), form.Get("SmsSid")), form.Get("CallSid"); {
	case msg != "":
		e.Type, e.Action = "message", firstOf(form.Get("MessageStatus"), form.Get("SmsStatus"))
		id = firstOf(id, twilioID(msg, e.Action))
	case call != "":
		e.Type, e.Action = "call", form.Get("CallStatus")
		id = firstOf(id, twilioID(call, e.Action))
	}
	if t := form.Get("EventType"); t != "" {
		e.Type = t
	}
	e.ID = idOrHash(id, r.Body)
	return e
}

// twilioID names one state of a message or call: its sid and status.
func twilioID(sid, status string) string {
	if status == "" {
		return sid
	}
	return sid + ":" + status
}

// Ack answers a form webhook (Voice, Messaging) with an empty TwiML
// document, which does nothing, instead of JSON Twilio cannot read.
func (twilio) Ack(r *Request) (*Reply, bool) {
	if !isForm(r.Header) {
		return nil, false
	}
	return &Reply{Status: 200, ContentType: "text/xml; charset=utf-8",
		Body: []byte(`<?xml version="1.0" encoding="UTF-8"?><Response></Response>`)}, true
}

// SentHeaders: the signature (and, under a Webhooks Rule, how it was
// made), the idempotency token and the account's home region.
func (twilio) SentHeaders(map[string]string) []string {
	return []string{"X-Twilio-Signature", "X-Twilio-Webhooks-Signature-Settings", "I-Twilio-Idempotency-Token", "X-Home-Region"}
}

func (twilio) CheckOptions(opts map[string]string) error {
	return optionSpec{}.check("twilio", opts)
}
