package main

import (
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/relaykit/relay/cloud/tlsconf"
)

// pemFile says what a bad PEM file setting should be: "" when it is unset
// or holds a block whose type ends in typ.
func pemFile(path, typ, want string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return want + ": " + err.Error()
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return want + " (no " + typ + " block in it)"
		}
		if strings.HasSuffix(blk.Type, typ) {
			return ""
		}
	}
}

// acmeDomains splits RELAY_ACME_DOMAINS; every entry must be a DNS name
// with a dot (ACME issues no certificates for IP addresses or wildcards
// over HTTP-01 and TLS-ALPN-01).
func acmeDomains(s string) ([]string, error) {
	var out []string
	for _, d := range strings.Split(s, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		if d == "" {
			continue
		}
		if net.ParseIP(d) != nil {
			return nil, fmt.Errorf("%q is an IP address", d)
		}
		if !strings.Contains(strings.Trim(d, "."), ".") || len(d) > 253 {
			return nil, fmt.Errorf("%q is not a domain name", d)
		}
		for _, label := range strings.Split(d, ".") {
			if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
				strings.IndexFunc(label, func(r rune) bool {
					return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
				}) >= 0 {
				return nil, fmt.Errorf("%q is not a domain name", d)
			}
		}
		out = append(out, d)
	}
	if s != "" && len(out) == 0 {
		return nil, errors.New("no domain in it")
	}
	return out, nil
}

// tlsOn reports whether cloud serve serves HTTPS.
func (o *options) tlsOn() bool { return o.tlsCert != "" || o.tlsKey != "" || o.acmeDomains != "" }

// tlsSetup builds the TLS of serve, or nil when it serves plain HTTP;
// httpsPort is the port it listens on. Call after loadRing (the ACME
// cache's default is in the data dir).
func (o *options) tlsSetup(httpsPort string, log *slog.Logger) (*tlsconf.Setup, error) {
	if !o.tlsOn() {
		return nil, nil
	}
	domains, _ := acmeDomains(o.acmeDomains) // checked
	cache := o.acmeCache
	if cache == "" {
		cache = filepath.Join(o.dataDir, "acme")
	}
	var httpsHost string
	if u, err := url.Parse(o.publicURL); err == nil && u.Scheme == "https" {
		httpsHost = u.Host
	}
	setup, err := tlsconf.New(tlsconf.Config{
		CertFile: o.tlsCert, KeyFile: o.tlsKey,
		ACMEDomains: domains, ACMECacheDir: cache, ACMEEmail: o.acmeEmail, ACMEDirectoryURL: o.acmeDirectory,
		HTTPSHost: httpsHost, HTTPSPort: httpsPort,
		Log: log,
	})
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return setup, nil
}

// tlsMode names how serve serves, for its start-up log line.
func tlsMode(o options) string {
	switch {
	case o.acmeDomains != "":
		return "acme"
	case o.tlsCert != "":
		return "files"
	}
	return "off"
}
