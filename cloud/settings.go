package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/ipallow"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/tlsconf"
)

// minAdminToken is the shortest admin token accepted: an admin token is
// a password anyone on the internet may try.
const minAdminToken = 32

// settingCheck is the check of one setting after the flags are parsed,
// whether its value came from the environment or from the flag. want says
// what a bad value should be on its own, and is "" for a good one. with,
// once every setting is good on its own, checks the setting against the
// others: its error is the whole message, naming each setting concerned.
type settingCheck struct {
	flag, env string
	hide      bool                // the value is a secret: never printed
	show      func(string) string // how the value is printed (default: as it is)
	want      func(*options) string
	with      func(*options) error
}

// settingChecks is the one table of the settings' checks: a check for
// every setting that is not a number or a duration, for the numbers and
// durations with ranges of their own, and for the settings that must go
// with others. Other numbers and durations are checked as they parse
// (envInt, envDuration, the flag package) and by check: 0 or more. A
// command checks the settings it registers.
var settingChecks = []settingCheck{
	{flag: "listen", env: "RELAY_LISTEN", want: func(o *options) string {
		if _, port, err := net.SplitHostPort(o.listen); err == nil {
			if n, err := strconv.Atoi(port); err == nil && n >= 0 && n <= 65535 {
				return ""
			}
		}
		return "host:port, such as :8080 or 127.0.0.1:8080"
	}},
	{flag: "database-url", env: "RELAY_DATABASE_URL", show: redactURL, want: func(o *options) string {
		return checkDatabaseURL(o.databaseURL)
	}},
	{flag: "data-dir", env: "RELAY_DATA_DIR", want: func(o *options) string {
		if fi, err := os.Stat(o.dataDir); o.dataDir != "" && err == nil && !fi.IsDir() {
			return "a directory (this is a file)"
		}
		return ""
	}},
	{flag: "admin-token", env: "RELAY_ADMIN_TOKEN", hide: true, want: func(o *options) string {
		switch {
		case o.adminToken == "":
			return ""
		case len(o.adminToken) < minAdminToken:
			return fmt.Sprintf("at least %d characters, such as $(head -c 32 /dev/urandom | base64), or unset to disable the admin API (got %d)", minAdminToken, len(o.adminToken))
		case strings.IndexFunc(o.adminToken, unicode.IsSpace) >= 0:
			return "no spaces or line breaks"
		}
		return ""
	}},
	{flag: "secret-keys", env: "RELAY_SECRET_KEYS", hide: true, want: func(o *options) string {
		if o.secretKeys == "" {
			return ""
		}
		if _, err := secrets.ParseRing(o.secretKeys); err != nil {
			return "comma-separated base64 keys of 32 bytes, such as $(head -c 32 /dev/urandom | base64): " + err.Error()
		}
		return ""
	}},
	{flag: "secret-keys-file", env: "RELAY_SECRET_KEYS_FILE", want: func(o *options) string {
		if o.secretKeysFile == "" {
			return ""
		}
		if o.secretKeys != "" {
			return "either RELAY_SECRET_KEYS or RELAY_SECRET_KEYS_FILE, not both"
		}
		if _, err := readKeysFile(o.secretKeysFile); err != nil {
			return "a readable file of base64 keys of 32 bytes, one a line or comma-separated: " + err.Error()
		}
		return ""
	}},
	{flag: "admin-token-file", env: "RELAY_ADMIN_TOKEN_FILE", want: func(o *options) string { return o.fileErr("admin-token-file") }},
	{flag: "jwt-key-file", env: "RELAY_JWT_KEY_FILE", want: func(o *options) string { return o.fileErr("jwt-key-file") }},
	{flag: "jwt-key", env: "RELAY_JWT_KEY", hide: true, want: func(o *options) string {
		if o.jwtKey != "" && len(o.jwtKey) < 32 {
			return fmt.Sprintf("at least 32 bytes (got %d)", len(o.jwtKey))
		}
		return ""
	}},
	{flag: "public-url", env: "RELAY_PUBLIC_URL", want: func(o *options) string {
		if o.publicURL == "" {
			return ""
		}
		u, err := url.Parse(o.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return "an absolute http:// or https:// URL without query, such as https://relay.example.com"
		}
		return ""
	}},
	{flag: "lease", env: "RELAY_LEASE", want: func(o *options) string { return positive(o.lease > 0) }},
	{flag: "heartbeat-floor", env: "RELAY_HEARTBEAT_FLOOR", want: func(o *options) string { return positive(o.heartbeatFloor > 0) }},
	{flag: "retain-acked", env: "RELAY_RETAIN_ACKED", want: func(o *options) string { return notNegative(o.retainAcked >= 0) }},
	{flag: "retain-dlq", env: "RELAY_RETAIN_DLQ", want: func(o *options) string { return notNegative(o.retainDLQ >= 0) }},
	{flag: "retain-rejections", env: "RELAY_RETAIN_REJECTIONS", want: func(o *options) string { return notNegative(o.retainRejected >= 0) }},
	{flag: "log-level", env: "RELAY_LOG_LEVEL", want: func(o *options) string {
		var l slog.Level
		if l.UnmarshalText([]byte(o.logLevel)) != nil {
			return "debug, info, warn or error"
		}
		return ""
	}},
	{flag: "log-format", env: "RELAY_LOG_FORMAT", want: func(o *options) string {
		if o.logFormat != "text" && o.logFormat != "json" {
			return "text or json"
		}
		return ""
	}},
	{flag: "rate-limit-per-min", env: "RELAY_RATE_LIMIT_PER_MIN", want: func(o *options) string { return inRange(o.rateLimit, 0, 1_000_000) }},
	{flag: "rate-limit-burst", env: "RELAY_RATE_LIMIT_BURST", want: func(o *options) string { return inRange(o.rateBurst, 0, 1_000_000) }},
	{flag: "quarantine-max", env: "RELAY_QUARANTINE_MAX", want: func(o *options) string { return inRange(o.quarantineMax, 0, 100_000_000) }},
	{flag: "quarantine-max-mb", env: "RELAY_QUARANTINE_MAX_MB", want: func(o *options) string { return inRange(o.quarantineMB, 0, 1<<20) }},
	{flag: "quarantine-host-max", env: "RELAY_QUARANTINE_HOST_MAX", with: func(o *options) error {
		if o.quarantineMax > 0 && o.quarantineHostMax > o.quarantineMax {
			return fmt.Errorf("RELAY_QUARANTINE_HOST_MAX=%d: a host's share cannot be more than RELAY_QUARANTINE_MAX=%d", o.quarantineHostMax, o.quarantineMax)
		}
		return nil
	}},
	{flag: "quarantine-host-max-mb", env: "RELAY_QUARANTINE_HOST_MAX_MB", with: func(o *options) error {
		if o.quarantineMB > 0 && o.quarantineHostMB > o.quarantineMB {
			return fmt.Errorf("RELAY_QUARANTINE_HOST_MAX_MB=%d: a host's share cannot be more than RELAY_QUARANTINE_MAX_MB=%d", o.quarantineHostMB, o.quarantineMB)
		}
		return nil
	}},
	// An in-flight budget of no bytes would refuse every request (or of
	// more than the address space).
	{flag: "intake-inflight-mb", env: "RELAY_INTAKE_INFLIGHT_MB", want: func(o *options) string { return budget(o.inflightMB) }},
	{flag: "intake-inflight-host-mb", env: "RELAY_INTAKE_INFLIGHT_HOST_MB", want: func(o *options) string { return budget(o.inflightHostMB) }},
	{flag: "intake-inflight-ip-mb", env: "RELAY_INTAKE_INFLIGHT_IP_MB", want: func(o *options) string { return budget(o.inflightIPMB) }},
	{flag: "trusted-proxies", env: "RELAY_TRUSTED_PROXIES", want: func(o *options) string {
		if _, err := parseProxies(o.trustedProxies); err != nil {
			return "comma-separated IPs or CIDRs, such as 10.0.0.0/8,192.168.1.7"
		}
		return ""
	}},
	{flag: "alert-interval", env: "RELAY_ALERT_INTERVAL", want: func(o *options) string { return positive(o.alertInterval > 0) }},
	{flag: "alert-resend", env: "RELAY_ALERT_RESEND", want: func(o *options) string { return positive(o.alertResend > 0) }},
	{flag: "alert-sink-allow", env: "RELAY_ALERT_SINK_ALLOW", want: func(o *options) string {
		if _, err := alert.ParseSinkAllow(o.alertSinkAllow); err != nil {
			return "comma-separated IPs or CIDRs, such as 127.0.0.1,10.20.0.0/16"
		}
		return ""
	}},
	{flag: "ipset-refresh", env: "RELAY_IPSET_REFRESH", want: func(o *options) string {
		if o.ipSetRefresh != 0 && o.ipSetRefresh < time.Minute {
			return "0 (never) or a duration of a minute or more, such as 24h"
		}
		return ""
	}},
	{flag: "ipset-urls", env: "RELAY_IPSET_URLS", want: func(o *options) string {
		if _, err := parseIPSetURLs(o.ipSetURLs); err != nil {
			return fmt.Sprintf("comma-separated NAME=URL, NAME one of %s and URL http(s)://, such as github=https://mirror.example/meta (%v)", strings.Join(ipallow.Names(), ", "), err)
		}
		return ""
	}},
	{flag: "host-late-after", env: "RELAY_HOST_LATE_AFTER", want: func(o *options) string { return positive(o.hostLateAfter > 0) }},
	{flag: "host-offline-after", env: "RELAY_HOST_OFFLINE_AFTER", want: func(o *options) string {
		if o.hostOfflineAfter <= o.hostLateAfter {
			return "a duration above RELAY_HOST_LATE_AFTER, such as 3m"
		}
		return ""
	}},
	{flag: "auth-failures-per-min", env: "RELAY_AUTH_FAILURES_PER_MIN", want: func(o *options) string { return inRange(o.authFailures, 1, 1_000_000) }},
	{flag: "sqlite-cache-mb", env: "RELAY_SQLITE_CACHE_MB", want: func(o *options) string { return inRange(o.sqliteCacheMB, 1, 65536) }},
	{flag: "go-memory-limit-mb", env: "RELAY_GO_MEMORY_LIMIT_MB", want: func(o *options) string { return inRange(o.goMemoryLimitMB, 0, 1<<20) }},

	// HTTPS: certificate files, or ACME; and the plain-HTTP listener.
	{flag: "tls-cert", env: "RELAY_TLS_CERT", want: func(o *options) string {
		return pemFile(o.tlsCert, "CERTIFICATE", "a readable PEM file of the certificate and its chain")
	}, with: func(o *options) error {
		if (o.tlsCert == "") != (o.tlsKey == "") {
			return errors.New("RELAY_TLS_CERT and RELAY_TLS_KEY: want both, or neither")
		}
		return nil
	}},
	{flag: "tls-key", env: "RELAY_TLS_KEY", want: func(o *options) string {
		return pemFile(o.tlsKey, "PRIVATE KEY", "a readable PEM file of a private key")
	}, with: func(o *options) error {
		if o.tlsCert == "" || o.tlsKey == "" {
			return nil
		}
		if err := tlsconf.CheckPair(o.tlsCert, o.tlsKey); err != nil {
			return fmt.Errorf("RELAY_TLS_KEY: want the private key of RELAY_TLS_CERT's certificate: %w", err)
		}
		return nil
	}},
	{flag: "acme-domains", env: "RELAY_ACME_DOMAINS", want: func(o *options) string {
		if _, err := acmeDomains(o.acmeDomains); err != nil {
			return "comma-separated domain names, such as relay.example.com (" + err.Error() + ")"
		}
		return ""
	}, with: func(o *options) error {
		if o.tlsCert != "" && o.acmeDomains != "" {
			return errors.New("RELAY_ACME_DOMAINS: want either RELAY_TLS_CERT and RELAY_TLS_KEY, or RELAY_ACME_DOMAINS, not both")
		}
		return nil
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
	}, with: func(o *options) error {
		switch {
		case o.httpRedirectListen != "" && !o.tlsOn():
			return errors.New("RELAY_HTTP_REDIRECT_LISTEN: want HTTPS on (RELAY_TLS_CERT and RELAY_TLS_KEY, or RELAY_ACME_DOMAINS) to redirect to")
		case o.httpRedirectListen != "" && o.httpRedirectListen == o.listen:
			return errors.New("RELAY_HTTP_REDIRECT_LISTEN: want another address than RELAY_LISTEN")
		}
		return nil
	}},
}

// parseProxies reads RELAY_TRUSTED_PROXIES: comma-separated IPs or CIDRs.
func parseProxies(list string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if net.ParseIP(p) == nil {
			if _, _, err := net.ParseCIDR(p); err != nil {
				return nil, fmt.Errorf("%q is neither an IP nor a CIDR", p)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// proxies is RELAY_TRUSTED_PROXIES, checked.
func (o *options) proxies() []string {
	p, _ := parseProxies(o.trustedProxies)
	return p
}

// parseIPSetURLs reads RELAY_IPSET_URLS: NAME=URL, comma-separated, each
// NAME a known IP set and each URL http or https.
func parseIPSetURLs(s string) (map[string]string, error) {
	out := map[string]string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, raw, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not NAME=URL", item)
		}
		if _, known := ipallow.Lookup(name); !known {
			return nil, fmt.Errorf("no IP set %q", name)
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%q is not an http(s) URL", raw)
		}
		out[name] = raw
	}
	return out, nil
}

// ipSetURLMap is RELAY_IPSET_URLS, checked.
func (o *options) ipSetURLMap() map[string]string {
	m, _ := parseIPSetURLs(o.ipSetURLs)
	return m
}

// sinkAllow is RELAY_ALERT_SINK_ALLOW, checked: the networks alert sinks
// may reach although refused by default.
func (o *options) sinkAllow() []netip.Prefix {
	allow, _ := alert.ParseSinkAllow(o.alertSinkAllow)
	return allow
}

func positive(ok bool) string {
	if ok {
		return ""
	}
	return "a duration above 0, such as 90s or 2m"
}

func notNegative(ok bool) string {
	if ok {
		return ""
	}
	return "a duration, 0 or more, such as 168h"
}

// budget says what a bad in-flight budget in MiB should be.
func budget(mb int) string {
	if mb >= 1 && mb <= 1<<30 {
		return ""
	}
	return fmt.Sprintf("a whole number of MiB from 1 to %d", 1<<30)
}

func inRange(n, lo, hi int) string {
	if n >= lo && n <= hi {
		return ""
	}
	return fmt.Sprintf("a whole number from %d to %d", lo, hi)
}

// checkDatabaseURL says what a bad RELAY_DATABASE_URL should be.
func checkDatabaseURL(u string) string {
	const want = "postgres://… or sqlite:PATH, such as sqlite:./data/cloud.db"
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		if _, err := url.Parse(u); err != nil {
			return want + " (this does not parse as a URL)"
		}
		return ""
	case strings.HasPrefix(u, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(u, "sqlite:"), "//")
		if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
			return want + " (a file path, without ? or #)"
		}
		return ""
	}
	return want
}

// check checks every setting registered on fs, after fs.Parse: each on
// its own, then, when every one is good, each with the others. A bad value
// is a usage error that names its variable (or its flag, when the flag set
// it) and what it wants; secrets are never printed.
func (o *options) check(fs *flag.FlagSet) error {
	byFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { byFlag[f.Name] = true })
	var errs []error
	checked := map[string]bool{}
	for _, c := range settingChecks {
		f := fs.Lookup(c.flag)
		if f == nil || c.want == nil {
			continue // not a setting of this command, or none checked on its own
		}
		checked[c.flag] = true
		want := c.want(o)
		if want == "" {
			continue
		}
		name := c.env
		if byFlag[c.flag] {
			name = "-" + c.flag
		}
		switch {
		case c.hide:
			errs = append(errs, fmt.Errorf("%s: want %s", name, want))
		case c.show != nil:
			errs = append(errs, fmt.Errorf("%s=%q: want %s", name, c.show(f.Value.String()), want))
		default:
			errs = append(errs, fmt.Errorf("%s=%q: want %s", name, f.Value.String(), want))
		}
	}
	// Numbers and durations without a check of their own: 0 or more, as
	// envInt and envDuration want (a flag may say -1).
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if checked[f.Name] || !ok || !byFlag[f.Name] {
			return
		}
		switch v := g.Get().(type) {
		case int:
			if v < 0 {
				errs = append(errs, fmt.Errorf("-%s=%d: want a whole number, 0 or more", f.Name, v))
			}
		case time.Duration:
			if v < 0 {
				errs = append(errs, fmt.Errorf("-%s=%s: want a duration, 0 or more", f.Name, v))
			}
		}
	})
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	// Every setting is good on its own: each with the others.
	for _, c := range settingChecks {
		if c.with == nil || fs.Lookup(c.flag) == nil {
			continue
		}
		if err := c.with(o); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// plainHTTPWarning is what `cloud serve` warns of at start when its public
// URL is plain http while it listens where other machines reach it and
// serves no TLS itself: logins, session cookies and the admin token would
// cross the network in clear, unless a proxy in front terminates TLS (then
// the public URL should say https). "" when there is nothing to warn of.
func plainHTTPWarning(o *options, servesTLS bool) string {
	if servesTLS || loopbackListen(o.listen) || !strings.HasPrefix(strings.ToLower(o.publicURL), "http://") {
		return ""
	}
	return "RELAY_PUBLIC_URL is plain http:// on a listener other machines reach: console logins, session cookies " +
		"and the admin token cross the network in clear; serve TLS (RELAY_TLS_*), or put a proxy that terminates " +
		"TLS in front and set RELAY_PUBLIC_URL=https://… (with RELAY_TRUSTED_PROXIES naming the proxy, its " +
		"X-Forwarded-Proto: https also marks the session cookie Secure)"
}

// loopbackListen reports whether a listen address only takes connections
// from this machine.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
