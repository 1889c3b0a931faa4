package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/acme/autocert"

	"github.com/relaykit/relay/cloud/store/sqlite"
)

// options are the settings shared by the commands.
type options struct {
	listen         string
	databaseURL    string
	dataDir        string
	adminToken     string
	secretKeys     string
	secretKeysFile string
	jwtKey         string
	publicURL      string
	lease          time.Duration
	retainAcked    time.Duration
	retainDLQ      time.Duration
	retainRejected time.Duration
	heartbeatFloor time.Duration
	logLevel       string
	logFormat      string
	rateLimit      int
	rateBurst      int
	quarantineMax  int
	quarantineMB   int
	trustedProxies string
	// a host's share of the quarantine, and its rate into it
	quarantineHostMax, quarantineHostMB, quarantinePerMin int
	authFailures                                          int
	inflightMB                                            int
	inflightHostMB                                        int
	inflightIPMB                                          int
	maxConnsPerIP                                         int
	sqliteCacheMB                                         int
	goMemoryLimitMB                                       int

	// alerts and host presence
	alertInterval, alertResend, hostLateAfter, hostOfflineAfter time.Duration
	alertSinkAllow                                              string
	// named IP sets: the scheduled refresh, and where each set is read
	ipSetRefresh time.Duration
	ipSetURLs    string
	// TLS: certificate files, or ACME; and the plain-HTTP listener
	tlsCert, tlsKey                                  string
	acmeDomains, acmeCache, acmeEmail, acmeDirectory string
	httpRedirectListen                               string

	// secrets given as files (secretfiles.go), and what went wrong reading them
	adminTokenFile, jwtKeyFile string
	fileErrs                   map[string]string

	envErrs []error // environment values that do not parse
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// envDuration reads a duration setting; a value that does not parse is
// reported by parse rather than silently replaced by the default.
func (o *options) envDuration(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		o.envErrs = append(o.envErrs, fmt.Errorf("%s=%q: want a duration such as 90s, 15m or 168h", name, v))
		return def
	}
	return d
}

// envInt reads a non-negative whole-number setting, like envDuration.
func (o *options) envInt(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		o.envErrs = append(o.envErrs, fmt.Errorf("%s=%q: want a whole number, 0 or more", name, v))
		return def
	}
	return n
}

func (o *options) register(fs *flag.FlagSet, withServe bool) {
	fs.StringVar(&o.databaseURL, "database-url", env("RELAY_DATABASE_URL", "sqlite:./data/cloud.db"), "postgres://… or sqlite:PATH (RELAY_DATABASE_URL)")
	fs.StringVar(&o.logLevel, "log-level", env("RELAY_LOG_LEVEL", "info"), "debug, info, warn or error (RELAY_LOG_LEVEL)")
	fs.StringVar(&o.logFormat, "log-format", env("RELAY_LOG_FORMAT", "text"), "text or json (RELAY_LOG_FORMAT)")
	if !withServe {
		return
	}
	fs.StringVar(&o.listen, "listen", env("RELAY_LISTEN", ":8080"), "listen address (RELAY_LISTEN)")
	fs.StringVar(&o.adminToken, "admin-token", env("RELAY_ADMIN_TOKEN", ""), "bearer token of the admin API; unset disables it (RELAY_ADMIN_TOKEN)")
	o.registerKeys(fs)
	fs.StringVar(&o.jwtKey, "jwt-key", env("RELAY_JWT_KEY", ""), "key that signs host tokens, at least 32 bytes (RELAY_JWT_KEY; default: a key file in the data dir)")
	fs.StringVar(&o.publicURL, "public-url", env("RELAY_PUBLIC_URL", ""), "URL providers and hosts use (RELAY_PUBLIC_URL; default: derived from each request)")
	fs.DurationVar(&o.lease, "lease", o.envDuration("RELAY_LEASE", 2*time.Minute), "lease on deliveries handed to a host (RELAY_LEASE)")
	fs.DurationVar(&o.retainAcked, "retain-acked", o.envDuration("RELAY_RETAIN_ACKED", 7*24*time.Hour), "how long acked deliveries are kept before they are pruned; 0 keeps them (RELAY_RETAIN_ACKED)")
	fs.DurationVar(&o.retainDLQ, "retain-dlq", o.envDuration("RELAY_RETAIN_DLQ", 7*24*time.Hour), "how long dead-lettered deliveries are kept before they are pruned; 0 keeps them (RELAY_RETAIN_DLQ)")
	fs.DurationVar(&o.retainRejected, "retain-rejections", o.envDuration("RELAY_RETAIN_REJECTIONS", 7*24*time.Hour), "how long the rejections audit is kept; 0 keeps it (RELAY_RETAIN_REJECTIONS)")
	fs.IntVar(&o.rateLimit, "rate-limit-per-min", o.envInt("RELAY_RATE_LIMIT_PER_MIN", 100), "intake requests per minute per host, unless the host sets its own (RELAY_RATE_LIMIT_PER_MIN)")
	fs.IntVar(&o.rateBurst, "rate-limit-burst", o.envInt("RELAY_RATE_LIMIT_BURST", 0), "intake burst per host, unless the host sets its own (RELAY_RATE_LIMIT_BURST; default: the per-minute limit)")
	fs.IntVar(&o.quarantineMax, "quarantine-max", o.envInt("RELAY_QUARANTINE_MAX", 10000), "requests kept while their source secret cannot be decrypted (RELAY_QUARANTINE_MAX)")
	fs.IntVar(&o.quarantineMB, "quarantine-max-mb", o.envInt("RELAY_QUARANTINE_MAX_MB", 1024), "MiB of requests (bodies, headers, URLs) the quarantine may hold in all (RELAY_QUARANTINE_MAX_MB)")
	fs.IntVar(&o.quarantineHostMax, "quarantine-host-max", o.envInt("RELAY_QUARANTINE_HOST_MAX", 0), "each host's share of the quarantine's requests (RELAY_QUARANTINE_HOST_MAX; default: a tenth of RELAY_QUARANTINE_MAX)")
	fs.IntVar(&o.quarantineHostMB, "quarantine-host-max-mb", o.envInt("RELAY_QUARANTINE_HOST_MAX_MB", 0), "each host's share of the quarantine's MiB (RELAY_QUARANTINE_HOST_MAX_MB; default: a tenth of RELAY_QUARANTINE_MAX_MB)")
	fs.IntVar(&o.quarantinePerMin, "quarantine-per-min", o.envInt("RELAY_QUARANTINE_PER_MIN", 60), "requests a host may have quarantined a minute; more are answered 503 and only counted (RELAY_QUARANTINE_PER_MIN)")
	fs.IntVar(&o.inflightMB, "intake-inflight-mb", o.envInt("RELAY_INTAKE_INFLIGHT_MB", 256), "MiB of request bodies intake holds at once in all (RELAY_INTAKE_INFLIGHT_MB)")
	fs.IntVar(&o.inflightHostMB, "intake-inflight-host-mb", o.envInt("RELAY_INTAKE_INFLIGHT_HOST_MB", 64), "MiB of request bodies intake holds at once per host (RELAY_INTAKE_INFLIGHT_HOST_MB)")
	fs.IntVar(&o.inflightIPMB, "intake-inflight-ip-mb", o.envInt("RELAY_INTAKE_INFLIGHT_IP_MB", 32), "MiB of request bodies intake holds at once per client address (RELAY_INTAKE_INFLIGHT_IP_MB)")
	fs.IntVar(&o.maxConnsPerIP, "max-conns-per-ip", o.envInt("RELAY_MAX_CONNS_PER_IP", 512), "connections open at once per client address (the peer's: behind a proxy, the proxy's); 0 is no limit (RELAY_MAX_CONNS_PER_IP)")
	fs.StringVar(&o.trustedProxies, "trusted-proxies", env("RELAY_TRUSTED_PROXIES", ""), "comma-separated IPs or CIDRs of proxies whose X-Forwarded-For names the client (RELAY_TRUSTED_PROXIES; default: none)")
	fs.DurationVar(&o.heartbeatFloor, "heartbeat-floor", o.envDuration("RELAY_HEARTBEAT_FLOOR", time.Second), "shortest heartbeat interval hosts may use (RELAY_HEARTBEAT_FLOOR)")
	fs.IntVar(&o.authFailures, "auth-failures-per-min", o.envInt("RELAY_AUTH_FAILURES_PER_MIN", 10), "failed claims, token requests and admin logins per minute per client IP before it gets 429 (RELAY_AUTH_FAILURES_PER_MIN)")
	fs.DurationVar(&o.alertInterval, "alert-interval", o.envDuration("RELAY_ALERT_INTERVAL", 15*time.Second), "how often the alert rules are evaluated (RELAY_ALERT_INTERVAL)")
	fs.DurationVar(&o.alertResend, "alert-resend", o.envDuration("RELAY_ALERT_RESEND", time.Hour), "how often a firing alert is sent again while it lasts (RELAY_ALERT_RESEND)")
	fs.StringVar(&o.alertSinkAllow, "alert-sink-allow", env("RELAY_ALERT_SINK_ALLOW", ""), "comma-separated IPs or CIDRs alert sinks may reach although loopback, link-local or private (RELAY_ALERT_SINK_ALLOW; default: none)")
	fs.DurationVar(&o.ipSetRefresh, "ipset-refresh", o.envDuration("RELAY_IPSET_REFRESH", 0), "how often the named IP sets are refreshed from their providers' URLs, the first time at start; 0 is never (RELAY_IPSET_REFRESH)")
	fs.StringVar(&o.ipSetURLs, "ipset-urls", env("RELAY_IPSET_URLS", ""), "comma-separated NAME=URL: read a named IP set from another URL than its provider's (RELAY_IPSET_URLS; default: none)")
	fs.DurationVar(&o.hostLateAfter, "host-late-after", o.envDuration("RELAY_HOST_LATE_AFTER", time.Minute), "a host not heard from for this long is late (RELAY_HOST_LATE_AFTER)")
	fs.DurationVar(&o.hostOfflineAfter, "host-offline-after", o.envDuration("RELAY_HOST_OFFLINE_AFTER", 3*time.Minute), "a host not heard from for this long is offline (RELAY_HOST_OFFLINE_AFTER)")
	fs.IntVar(&o.sqliteCacheMB, "sqlite-cache-mb", o.envInt("RELAY_SQLITE_CACHE_MB", sqlite.DefaultCacheMB), "MiB of SQLite page cache: the writer's, and one pool for every connection's pages (each reader keeps at most an eighth) (RELAY_SQLITE_CACHE_MB)")
	fs.IntVar(&o.goMemoryLimitMB, "go-memory-limit-mb", o.envInt("RELAY_GO_MEMORY_LIMIT_MB", 22), "SQLite only: MiB of the Go runtime's memory (heap, stacks) its soft limit starts from, raised by the request bodies intake holds, by 8 times the bodies of leased deliveries being written to hosts (the most at once over the last 10–20 s) and by 40 KiB for each connection open (sockets and long polls included); the collector works harder near it; 0 is no limit (intake at 256 senders peaks 3–6 MiB higher); GOMEMLIMIT, if set, wins (RELAY_GO_MEMORY_LIMIT_MB)")
	o.registerTLS(fs)
}

// registerTLS adds the settings of HTTPS.
func (o *options) registerTLS(fs *flag.FlagSet) {
	fs.StringVar(&o.tlsCert, "tls-cert", env("RELAY_TLS_CERT", ""), "PEM certificate (chain) to serve HTTPS with, read again when the file changes and on SIGHUP (RELAY_TLS_CERT; with RELAY_TLS_KEY)")
	fs.StringVar(&o.tlsKey, "tls-key", env("RELAY_TLS_KEY", ""), "PEM private key of RELAY_TLS_CERT (RELAY_TLS_KEY)")
	fs.StringVar(&o.acmeDomains, "acme-domains", env("RELAY_ACME_DOMAINS", ""), "comma-separated domains to get certificates for with ACME (Let's Encrypt) and serve HTTPS (RELAY_ACME_DOMAINS; instead of RELAY_TLS_CERT)")
	fs.StringVar(&o.acmeCache, "acme-cache", env("RELAY_ACME_CACHE", ""), "directory of the ACME account key and certificates (RELAY_ACME_CACHE; default: acme in the data dir)")
	fs.StringVar(&o.acmeEmail, "acme-email", env("RELAY_ACME_EMAIL", ""), "contact address for the ACME account, told of expiring certificates (RELAY_ACME_EMAIL; default: none)")
	fs.StringVar(&o.acmeDirectory, "acme-directory-url", env("RELAY_ACME_DIRECTORY_URL", autocert.DefaultACMEDirectory), "the ACME directory, such as Let's Encrypt's staging one (RELAY_ACME_DIRECTORY_URL)")
	fs.StringVar(&o.httpRedirectListen, "http-redirect-listen", env("RELAY_HTTP_REDIRECT_LISTEN", ""), "plain-HTTP listen address that redirects to HTTPS and answers ACME HTTP-01 challenges, such as :80 (RELAY_HTTP_REDIRECT_LISTEN; default: none; needs TLS)")
}

// registerKeys adds the settings that locate the secret key ring.
func (o *options) registerKeys(fs *flag.FlagSet) {
	fs.StringVar(&o.dataDir, "data-dir", env("RELAY_DATA_DIR", ""), "where generated key files live (RELAY_DATA_DIR; default: the SQLite file's directory, else ./data)")
	fs.StringVar(&o.secretKeys, "secret-keys", env("RELAY_SECRET_KEYS", ""), "comma-separated base64 32-byte keys; the first encrypts, all decrypt (RELAY_SECRET_KEYS; default: a key file in the data dir)")
	fs.StringVar(&o.secretKeysFile, "secret-keys-file", env("RELAY_SECRET_KEYS_FILE", ""), "file of base64 32-byte keys, comma- or newline-separated, read again on SIGHUP (RELAY_SECRET_KEYS_FILE; instead of RELAY_SECRET_KEYS)")
}

// logger builds the logger of checked settings.
func (o *options) logger() *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(o.logLevel))
	hopts := &slog.HandlerOptions{Level: level}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, hopts))
}

// openStore picks the engine from the URL's scheme; sqliteCacheMB is the

// parse reads a command's flags (defaults from the environment), checks
// every setting and builds its logger.
func parse(name string, args []string) (options, *slog.Logger, error) {
	var o options
	fs := o.flagSet(name)
	log, err := o.parseFlags(fs, args)
	return o, log, err
}

// parseFlags parses args into o's settings registered on fs, checks every
// one of them and builds the logger.
func (o *options) parseFlags(fs *flag.FlagSet, args []string) (*slog.Logger, error) {
	if err := fs.Parse(args); err != nil {
		return nil, usageError{err}
	}
	if len(o.envErrs) > 0 {
		return nil, usageError{errors.Join(o.envErrs...)}
	}
	o.readSecretFiles(fs)
	if err := o.check(fs); err != nil {
		return nil, err
	}
	log := o.logger()
	for _, w := range secretFlagWarnings(fs) {
		log.Warn(w)
	}
	return log, nil
}

// redactURL hides a password in a database URL.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}
