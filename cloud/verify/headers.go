package verify

import (
	"fmt"
	"strings"
)

// ForwardOption is the source option naming the headers, beyond the
// provider's own, that are kept with a webhook: a comma-separated list of
// header names, a name ending in "*" for every header it starts with, or "*"
// alone for every header the sender chose. Every provider takes it.
const ForwardOption = "forward_headers"

// HeaderSender names the headers a provider documents sending with its
// webhooks (its event, delivery, signature, timestamp and hook headers); a
// name ending in "*" stands for a documented family. Only these, the
// generic ones (commonHeaders) and those the source's forward_headers names
// are stored and forwarded: a request resent with headers of the sender's
// own choosing (an Authorization, a Cookie, an X-Forwarded-User) does not
// hand them to the local app.
type HeaderSender interface {
	SentHeaders(opts map[string]string) []string
}

// commonHeaders describe the body itself and whoever sent it; every
// provider's list has them.
var commonHeaders = []string{"Content-Type", "Content-Encoding", "User-Agent"}

// HeaderFilter says which of a request's headers are kept. The zero value
// keeps none.
type HeaderFilter struct {
	all      bool
	names    map[string]bool // lower-case
	prefixes []string        // lower-case
}

// Size approximates the bytes f holds.
func (f HeaderFilter) Size() int {
	n := 0
	for k := range f.names {
		n += 48 + len(k)
	}
	for _, p := range f.prefixes {
		n += 16 + len(p)
	}
	return n
}

// Keep reports whether the header named name (any case) is kept.
func (f HeaderFilter) Keep(name string) bool {
	if f.all {
		return true
	}
	name = strings.ToLower(name)
	if f.names[name] {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// All reports whether every header is kept.
func (f HeaderFilter) All() bool { return f.all }

func (f *HeaderFilter) add(names ...string) {
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "":
		case n == "*":
			f.all = true
		case strings.HasSuffix(n, "*"):
			f.prefixes = append(f.prefixes, strings.TrimSuffix(n, "*"))
		default:
			if f.names == nil {
				f.names = make(map[string]bool)
			}
			f.names[n] = true
		}
	}
}

// ForwardedHeaders is what a source of the provider keeps of a request's
// headers: the provider's own (HeaderSender) and the generic ones, plus
// those its forward_headers option names. A provider that names none — the
// generic scheme, whose senders are the operator's own systems — keeps
// every header unless forward_headers names a list; then it keeps the
// headers its options read, the generic ones and that list. The relay's
// hop-by-hop and secret-bearing exclusions apply on top, whatever is kept.
func ForwardedHeaders(p Provider, opts map[string]string) HeaderFilter {
	var f HeaderFilter
	extra := opts[ForwardOption]
	hs, ok := p.(HeaderSender)
	if !ok || (p.Name() == "generic" && strings.TrimSpace(extra) == "") {
		f.all = true
		return f
	}
	f.add(commonHeaders...)
	f.add(hs.SentHeaders(opts)...)
	f.add(strings.Split(extra, ",")...)
	return f
}

// checkForwardHeaders validates forward_headers: a comma-separated list of
// header names, each maybe ending in "*", or "*".
func checkForwardHeaders(v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("empty: name headers (X-Tenant, X-Acme-*), or * for every header")
	}
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		if n == "*" {
			continue
		}
		base := strings.TrimSuffix(n, "*")
		if base == "" {
			return fmt.Errorf("an empty name in %q", v)
		}
		if err := headerName(base); err != nil {
			return err
		}
		if strings.Contains(base, "*") {
			return fmt.Errorf("%q: * only ends a name", n)
		}
	}
	return nil
}
