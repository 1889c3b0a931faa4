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

// tlsChecks check each TLS setting on its own; checkTLS checks them
// together once they are all parsed.
var tlsChecks = []settingCheck{
	{flag: "tls-cert", env: "RELAY_TLS_CERT", want: func(o *options) string {
		return pemFile(o.tlsCert, "CERTIFICATE", "a readable PEM file of the certificate and its chain")
	}},
	{flag: "tls-key", env: "RELAY_TLS_KEY", want: func(o *options) string {
		return pemFile(o.tlsKey, "PRIVATE KEY", "a readable PEM file of a private key")
	}},
	{flag: "acme-domains", env: "RELAY_ACME_DOMAINS", want: func(o *options) string {
		if _, err := acmeDomains(o.acmeDomains); err != nil {
			return "comma-separated domain names, such as relay.example.com (" + err.Error() + ")"
		}
		return ""
	}},
	{flag: "acme-cache", env: "RELAY_ACME_CACHE", want: func(o *options) string {
		if fi, err := os.Stat(o.acmeCache); o.acmeCache != "" && err == nil && !fi.IsDir() {
			return "a directory (this is a file)"
		}
		return ""
	}},
	{flag: "acme-email", env: "RELAY_ACME_EMAIL", want: func(o *options) string {
		e := o.acmeEmail
		if e == "" {
			return ""
		}
		at := strings.Index(e, "@")
		if at <= 0 || at == len(e)-1 || strings.Count(e, "@") > 1 || strings.ContainsAny(e, " \t\r\n,<>") {
			return "an email address, such as ops@example.com"
		}
		return ""
	}},
	{flag: "acme-directory-url", env: "RELAY_ACME_DIRECTORY_URL", want: func(o *options) string {
		u, err := url.Parse(o.acmeDirectory)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return "an https:// URL, such as https://acme-staging-v02.api.letsencrypt.org/directory"
		}
		return ""
	}},
	{flag: "http-redirect-listen", env: "RELAY_HTTP_REDIRECT_LISTEN", want: func(o *options) string {
		if o.httpRedirectListen == "" {
			return ""
		}
		if _, _, err := net.SplitHostPort(o.httpRedirectListen); err != nil {
			return "host:port, such as :80, or unset"
		}
		return ""
	}},
}

func init() { settingChecks = append(settingChecks, tlsChecks...) }

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

// checkTLS checks the TLS settings together, after each was checked on
// its own.
func (o *options) checkTLS() error {
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usageError{errors.New("RELAY_TLS_CERT and RELAY_TLS_KEY: want both, or neither")}
	case o.tlsCert != "" && o.acmeDomains != "":
		return usageError{errors.New("RELAY_ACME_DOMAINS: want either RELAY_TLS_CERT and RELAY_TLS_KEY, or RELAY_ACME_DOMAINS, not both")}
	case o.httpRedirectListen != "" && !o.tlsOn():
		return usageError{errors.New("RELAY_HTTP_REDIRECT_LISTEN: want HTTPS on (RELAY_TLS_CERT and RELAY_TLS_KEY, or RELAY_ACME_DOMAINS) to redirect to")}
	case o.httpRedirectListen != "" && o.httpRedirectListen == o.listen:
		return usageError{errors.New("RELAY_HTTP_REDIRECT_LISTEN: want another address than RELAY_LISTEN")}
	}
	if o.tlsCert != "" {
		if err := tlsconf.CheckPair(o.tlsCert, o.tlsKey); err != nil {
			return usageError{fmt.Errorf("RELAY_TLS_KEY: want the private key of RELAY_TLS_CERT's certificate: %w", err)}
		}
	}
	return nil
}

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
