// Package ipallow is what a source's IP allowlist is made of: CIDRs,
// single addresses and named sets — providers that publish the addresses
// their webhooks come from — with the sets this build ships and the
// parsing of what a provider publishes.
package ipallow

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Publisher is a provider that publishes its webhook senders' addresses.
type Publisher struct {
	Name string
	// URL is where the provider publishes the list: a JSON document
	// (Field names the array of CIDRs in it) or text, one a line.
	URL   string
	Field string
	// Shipped is the list as this build ships it, taken on ShippedAt from
	// ShippedFrom; none when it could not be confirmed at build time (the
	// set must be refreshed before a source may name it).
	Shipped     []string
	ShippedAt   time.Time
	ShippedFrom string
}

// Publishers are the named sets. Providers that publish no list of their
// webhook senders (Slack, Shopify, GitLab.com, Linear, Discord, Twilio,
// Vercel among those the relay verifies) have none: an allowlist adds
// nothing for them beyond the signature.
var Publishers = []*Publisher{
	{
		// GitHub publishes its webhook senders in the "hooks" field of its
		// Meta API. Its changelog of 2026-10-29 ("Webhook IP ranges added
		// to the Meta API") added 9.234.98.160/28, 9.234.98.176/28 and
		// 9.234.106.48/28 to that field; the rest of the list could not be
		// read when this build was made, so none is shipped: refresh the
		// set (cloud ctl ipsets refresh github) before naming it.
		Name: "github", URL: "https://api.github.com/meta", Field: "hooks",
	},
	{
		// Stripe's webhook IPs, https://stripe.com/files/ips/ips_webhooks.txt
		// (listed on https://docs.stripe.com/ips#webhook-notifications), as
		// mirrored on 2026-05-15: 15 addresses.
		Name: "stripe", URL: "https://stripe.com/files/ips/ips_webhooks.txt",
		Shipped: []string{
			"3.18.12.63", "3.69.109.8", "3.120.168.93", "3.130.192.231", "13.235.14.237",
			"13.235.122.149", "18.211.135.69", "35.154.171.200", "35.157.207.129", "52.15.183.38",
			"54.88.130.119", "54.88.130.237", "54.187.174.169", "54.187.205.235", "54.187.216.72",
		},
		ShippedAt:   time.Date(2026, 5, 15, 0, 0, 0, 0, time.UTC),
		ShippedFrom: "https://stripe.com/files/ips/ips_webhooks.txt",
	},
	{
		// Telegram's guide to bot webhooks names the ranges its webhook
		// requests come from (149.154.160.0/20 and 91.108.4.0/22, in "How
		// do I check for open ports or limit access to my bot?"). It
		// publishes no list of webhook senders as such: a refresh reads
		// the list of all of Telegram's networks, which holds both.
		Name: "telegram", URL: "https://core.telegram.org/resources/cidr.txt",
		Shipped:     []string{"149.154.160.0/20", "91.108.4.0/22"},
		ShippedAt:   time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC),
		ShippedFrom: "https://core.telegram.org/bots/webhooks",
	},
}

// Lookup returns the named set's publisher.
func Lookup(name string) (*Publisher, bool) {
	i := slices.IndexFunc(Publishers, func(p *Publisher) bool { return p.Name == name })
	if i < 0 {
		return nil, false
	}
	return Publishers[i], true
}

// Names lists the named sets.
func Names() []string {
	out := make([]string, len(Publishers))
	for i, p := range Publishers {
		out[i] = p.Name
	}
	return out
}

// MaxEntries bounds a source's allowlist, and MaxSetPrefixes a named set.
const (
	MaxEntries     = 100
	MaxSetPrefixes = 10_000
)

// Entry is one entry of an allowlist: a network, or a named set.
type Entry struct {
	Prefix netip.Prefix // valid unless Set is given
	Set    string
}

// ParseEntry reads an allowlist entry: a CIDR (its address masked), a
// single IP (a /32 or /128), or the name of a known set.
func ParseEntry(s string) (Entry, error) {
	s = strings.TrimSpace(s)
	if p, err := ParsePrefix(s); err == nil {
		return Entry{Prefix: p}, nil
	}
	if _, ok := Lookup(s); ok {
		return Entry{Set: s}, nil
	}
	return Entry{}, fmt.Errorf("%q is not a CIDR, an IP address or a known IP set (%s)", s, strings.Join(Names(), ", "))
}

// ParsePrefix reads a CIDR or a single IP; an IPv4-mapped IPv6 address is
// taken as its IPv4 one.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseList reads the entries of an allowlist, each checked: the first
// bad one is the error, named.
func ParseList(entries []string) ([]Entry, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("at most %d entries", MaxEntries)
	}
	out := make([]Entry, 0, len(entries))
	for _, s := range entries {
		e, err := ParseEntry(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Normalize is an allowlist as stored: each entry in its canonical form
// (a masked CIDR, a set's name), repeats dropped, in the order given.
func Normalize(entries []Entry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		s := e.Set
		if s == "" {
			s = e.Prefix.String()
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// ErrEmpty: a published list held no address.
var ErrEmpty = errors.New("the list holds no address")

// ParsePublished reads a list of addresses as published: a JSON object
// (field names the array of CIDRs in it), a JSON array of strings, or text
// with one CIDR or address a line ('#' starts a comment). An empty list is
// an error (ErrEmpty), as is any entry that does not parse.
func ParsePublished(data []byte, field string) ([]netip.Prefix, error) {
	trimmed := bytes.TrimSpace(data)
	var raw []string
	switch {
	case len(trimmed) > 0 && trimmed[0] == '{':
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &doc); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
		if field == "" {
			return nil, errors.New("a JSON object, but this set names no field to read")
		}
		v, ok := doc[field]
		if !ok {
			return nil, fmt.Errorf("the JSON object has no %q field", field)
		}
		if err := json.Unmarshal(v, &raw); err != nil {
			return nil, fmt.Errorf("field %q: %w", field, err)
		}
	case len(trimmed) > 0 && trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &raw); err != nil {
			return nil, fmt.Errorf("not a JSON array of strings: %w", err)
		}
	default:
		sc := bufio.NewScanner(bytes.NewReader(trimmed))
		sc.Buffer(nil, 64<<10)
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				raw = append(raw, line)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	if len(raw) == 0 {
		return nil, ErrEmpty
	}
	if len(raw) > MaxSetPrefixes {
		return nil, fmt.Errorf("%d entries; at most %d", len(raw), MaxSetPrefixes)
	}
	out := make([]netip.Prefix, 0, len(raw))
	for i, s := range raw {
		p, err := ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %q is not a CIDR or an IP address", i+1, s)
		}
		out = append(out, p)
	}
	return out, nil
}

// Strings are prefixes in their text form.
func Strings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// Prefixes reads stored CIDRs, skipping any that do not parse.
func Prefixes(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		if p, err := ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// List is a resolved allowlist. The zero List allows any address; a
// restricted one only those in its prefixes (none, when the sets it names
// hold none yet).
type List struct {
	Restricted bool
	Prefixes   []netip.Prefix
}

// Allows says whether addr is allowed.
func (l *List) Allows(addr netip.Addr) bool {
	if l == nil || !l.Restricted {
		return true
	}
	addr = addr.Unmap()
	for _, p := range l.Prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
