// Command cloud is the relay's public side: it takes provider webhooks,
// verifies and stores them durably, and hands them to hosts that heartbeat in.
//
//	cloud serve     run the server (migrates first)
//	cloud migrate   apply database migrations and exit
//	cloud rekey     re-encrypt every stored secret with the first key
//	cloud version   print the version and the commit
//	cloud ctl       the operator's command line over the admin API
//	cloud backup    copy the SQLite database to a file, online
//	cloud health    is the server of these settings on this machine ready?
//
// Every setting is an environment variable and a flag of the same meaning;
// -h (or --help) of each command prints its usage and flags on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/acme/autocert"

	"github.com/relaykit/relay/cloud/alert"
	"github.com/relaykit/relay/cloud/auth"
	"github.com/relaykit/relay/cloud/console"
	"github.com/relaykit/relay/cloud/ctl"
	"github.com/relaykit/relay/cloud/delivery"
	"github.com/relaykit/relay/cloud/secrets"
	"github.com/relaykit/relay/cloud/server"
	"github.com/relaykit/relay/cloud/slewclock"
	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/cloud/store/postgres"
	"github.com/relaykit/relay/cloud/store/sqlite"
	"github.com/relaykit/relay/cloud/sweep"
	"github.com/relaykit/relay/cloud/tlsconf"
	"github.com/relaykit/relay/shared/buildinfo"
	"github.com/relaykit/relay/shared/telemetry"
)

const usage = `usage: cloud <command> [flags]

commands:
  serve     run the relay's cloud server (applies migrations first)
  migrate   apply database migrations and exit
  rekey     re-encrypt every stored secret (sources', alert sinks') with the first key of
            RELAY_SECRET_KEYS or RELAY_SECRET_KEYS_FILE
  backup    copy the SQLite database to a new file while the cloud runs
  health    ask the cloud serve of the same settings on this machine if it is ready (exit 0) or not (1)
  ctl       manage a running cloud: hosts, sources, deliveries, inspect, tail (cloud ctl -h)
  version   print the version and the commit it was built from

Run "cloud <command> -h" for the usage and flags of a command.
`

// commandInfo is what a command's -h says besides its flags.
type commandInfo struct {
	args  string // what follows "cloud NAME [flags]"
	about string
	serve bool // every setting of serve, not only the database's and the log's
	keys  bool // the key ring's settings too
}

// commands are the commands of settings; ctl and version have their own
// help.
var commands = map[string]commandInfo{
	"serve": {serve: true, about: `Runs the relay's cloud server on RELAY_LISTEN: provider intake, the host
protocol (heartbeats and sockets), the admin API and the console. Applies
pending database migrations first. SIGHUP reads RELAY_SECRET_KEYS_FILE and
the TLS certificate again; SIGINT or SIGTERM stops it gracefully.`},
	"migrate": {about: `Applies pending database migrations to RELAY_DATABASE_URL and exits
(cloud serve applies them too, at start).`},
	"rekey": {keys: true, about: `Re-encrypts every stored secret with the first key of the ring: source
secrets, alert sinks' URLs and signing secrets, and the key canary. The ring
is RELAY_SECRET_KEYS, or the file RELAY_SECRET_KEYS_FILE, or else the key
file in the data dir. Run it after a new key is first in the ring
and every cloud serve has it (SIGHUP with RELAY_SECRET_KEYS_FILE); then the
old key can be dropped. A source or sink no key in the ring opens is left as
it was and named, and the command exits 1.`},
	"backup": {args: " FILE", about: `Copies the SQLite database of RELAY_DATABASE_URL to FILE (new, 0600) while
the cloud runs: one consistent snapshot. Postgres is backed up with pg_dump.`},
	"health": {serve: true, about: `Asks the cloud serve of the same settings on this machine (RELAY_LISTEN,
and HTTPS when TLS is set) whether it is ready: GET /readyz. Exits 0 when
it is ready, 1 when it is not or does not answer. For container and
supervisor health checks.`},
}

// flagSet is the flag set of command name, its settings registered on o.
// It prints nothing itself: run prints -h on stdout and errors on stderr.
func (o *options) flagSet(name string) *flag.FlagSet {
	ci := commands[name]
	fs := flag.NewFlagSet("cloud "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs, ci.serve)
	o.registerSecretFiles(fs)
	if ci.keys {
		o.registerKeys(fs)
	}
	return fs
}

// secretFlags are the settings whose values -h never prints.
var secretFlags = map[string]bool{"admin-token": true, "secret-keys": true, "jwt-key": true}

// printHelp prints what -h of command name prints: its usage, what it
// does and its flags, with the defaults the environment gives them
// (secrets withheld, a database password redacted).
func printHelp(w io.Writer, name string) {
	ci := commands[name]
	fmt.Fprintf(w, "usage: cloud %s [flags]%s\n\n%s\n\n", name, ci.args, ci.about)
	fmt.Fprintf(w, "flags (each is also the environment variable named in parentheses; a flag wins):\n")
	var o options
	fs := o.flagSet(name)
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case secretFlags[f.Name] && f.DefValue != "":
			f.DefValue = ""
			f.Usage += " (set; not shown)"
		case f.Name == "database-url":
			f.DefValue = redactURL(f.DefValue)
		}
	})
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runIO(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is runIO with the process's stdout.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdout, stderr)
}

// runIO runs one command and returns the process's exit code: 0, 1 when
// the command failed, 2 when it was used wrongly (a bad flag or setting),
// with the reason written to stderr. -h prints on stdout and exits 0.
func runIO(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:])
	case "migrate":
		err = migrate(ctx, args[1:])
	case "rekey":
		err = rekey(ctx, args[1:])
	case "ctl":
		return ctl.Run(ctx, args[1:], os.Stdin, stdout, stderr, os.Getenv)
	case "health":
		err = health(ctx, args[1:])
	case "backup":
		err = backup(ctx, args[1:])
	case "version", "-v", "--version":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprint(stdout, "usage: cloud version\n\nPrints the version, the commit it was built from, the Go version and the platform.\n")
			return 0
		}
		fmt.Fprintln(stdout, buildinfo.String("cloud"))
	case "-h", "--help", "-help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "cloud: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) && errors.Is(ue.error, flag.ErrHelp) {
			printHelp(stdout, args[0])
			return 0
		}
		fmt.Fprintf(stderr, "cloud: %v\n", err)
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "(cloud %s -h for its usage and flags)\n", args[0])
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

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
// SQLite writer's page cache (0: the default).
func openStore(ctx context.Context, url string, sqliteCacheMB int) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return postgres.Open(ctx, url)
	case strings.HasPrefix(url, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("database directory: %w", err)
		}
		return sqlite.OpenWith(ctx, path, sqlite.Options{CacheMB: sqliteCacheMB})
	}
	return nil, usageError{fmt.Errorf("RELAY_DATABASE_URL=%q: want postgres://… or sqlite:PATH", redactURL(url))}
}

// groupFlushers is how many intake transactions may be open at once:
// SQLite has one writer; on Postgres one batch gathers while another
// commits. More flushers make smaller batches, each costing Postgres a
// commit: on two cores, 4 flushers took more of the database's CPU per
// webhook than 2 for no more webhooks/s, and a longer tail at 2,000/s.
func groupFlushers(url string) int {
	if strings.HasPrefix(url, "sqlite:") {
		return 1
	}
	return 2
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

// openMigrated opens the store and applies pending migrations.
func openMigrated(ctx context.Context, url string, sqliteCacheMB int) (store.Store, store.MigrateResult, error) {
	st, err := openStore(ctx, url, sqliteCacheMB)
	if err != nil {
		return nil, store.MigrateResult{}, err
	}
	res, err := st.MigrateReport(ctx)
	if err != nil {
		st.Close()
		return nil, res, fmt.Errorf("migrate: %w", err)
	}
	// Reading the migrations leaves about 12 MiB of garbage (goose parses
	// every file at once, each through a 4 MiB buffer of its own). Left to
	// the collector, it set the heap's goal under the first load to twice
	// that, and the embedded cloud's peak RSS to 85–97 MiB at 256 senders
	// where it holds 70–75 once settled: returned now, it costs nothing.
	runtime.GC() // the parser pools its buffers: the first collection moves them aside, the next frees them
	debug.FreeOSMemory()
	return st, res, nil
}

// migrated says what a migration run did, as `cloud migrate` prints it.
func migrated(res store.MigrateResult) string {
	if res.Applied == 0 {
		return fmt.Sprintf("schema current at version %d", res.Version)
	}
	return fmt.Sprintf("%d migrations applied (now at version %d)", res.Applied, res.Version)
}

func migrate(ctx context.Context, args []string) error {
	o, _, err := parse("migrate", args)
	if err != nil {
		return err
	}
	st, res, err := openMigrated(ctx, o.databaseURL, o.sqliteCacheMB)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Println(migrated(res))
	return nil
}

func serve(ctx context.Context, args []string) error {
	o, log, err := parse("serve", args)
	if err != nil {
		return err
	}
	// Intake, store and lease spans go to OTEL_EXPORTER_OTLP_ENDPOINT when
	// it is set.
	tracer, shutdownTracing, err := telemetry.Setup(ctx, "relay-cloud", os.Getenv)
	var bad *telemetry.SettingError
	if errors.As(err, &bad) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdownTracing(sctx); err != nil {
			log.Warn("trace export at exit", "err", err)
		}
	}()
	// SIGHUP reloads the secret key ring (see reloadKeys); one that comes
	// while the server starts is handled once it runs, rather than killing it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	proxies, err := parseProxies(o.trustedProxies)
	if err != nil {
		return err
	}
	if err := o.checkQuarantineShares(); err != nil {
		return err
	}
	if err := o.checkBudgets(); err != nil {
		return err
	}
	if err := o.checkTLS(); err != nil {
		return err
	}
	ring, err := loadRing(&o)
	if err != nil {
		return err
	}
	jwtKey, err := loadJWTKey(o)
	if err != nil {
		return err
	}
	// The system clock, its steps absorbed gradually (see package slewclock).
	clock := slewclock.New(log)
	tokens, err := auth.NewTokens(jwtKey, auth.DefaultTokenTTL, clock)
	if err != nil {
		return usageError{err}
	}

	st, mres, err := openMigrated(ctx, o.databaseURL, o.sqliteCacheMB)
	if err != nil {
		return err
	}
	if mres.Applied > 0 {
		log.Info("database migrated", "applied", mres.Applied, "version", mres.Version)
	}
	// Go's memory limit (SQLite): intake, what is written to hosts and
	// the listeners report to it.
	mem := newMemLimit(o.goMemoryLimitMB, o.databaseURL, os.LookupEnv, clock.Now)
	// Webhooks arriving together share one commit (see store.GroupCommit).
	var srv *server.Server
	st = store.GroupCommit(st, store.GroupOptions{
		Flushers: groupFlushers(o.databaseURL),
		Observe:  func(n int, took time.Duration) { srv.ObserveInsertBatch(n, took) },
	})
	defer st.Close()
	if o.adminToken == "" {
		log.Warn("RELAY_ADMIN_TOKEN is not set: the admin API refuses every request")
		// No console session is valid without a token; deleting them makes
		// removing the token final: setting the same token again later
		// brings none of them back.
		n, err := st.SessionDeleteAll(ctx)
		if err != nil {
			return fmt.Errorf("end console sessions: %w", err)
		}
		if n > 0 {
			log.Info("console sessions ended: RELAY_ADMIN_TOKEN is not set", "ended", n)
		}
	}
	if o.publicURL == "" && !loopbackListen(o.listen) {
		log.Warn("RELAY_PUBLIC_URL is not set: webhook URLs the admin API answers are built from each request's Host header, which the client chooses; set RELAY_PUBLIC_URL in production", "listen", o.listen)
	}

	presence := alert.PresenceConfig{LateAfter: o.hostLateAfter, OfflineAfter: o.hostOfflineAfter}
	srv = server.New(st, ring, tokens, clock, log, server.Config{
		AdminToken: o.adminToken, PublicURL: o.publicURL, LeaseFor: o.lease, HeartbeatFloor: o.heartbeatFloor,
		RateLimitPerMin: o.rateLimit, RateLimitBurst: o.rateBurst, QuarantineMax: o.quarantineMax,
		QuarantineMaxBytes: int64(o.quarantineMB) << 20,
		TrustedProxies:     proxies,
		QuarantineHostMax:  o.quarantineHostMax, QuarantineHostMaxBytes: int64(o.quarantineHostMB) << 20,
		QuarantinePerMin:   o.quarantinePerMin,
		AuthFailuresPerMin: o.authFailures,
		Presence:           presence,
		AlertSinkAllow:     o.sinkAllow(),
		Tracer:             tracer,
		InflightBytes:      int64(o.inflightMB) << 20,
		InflightHostBytes:  int64(o.inflightHostMB) << 20,
		InflightIPBytes:    int64(o.inflightIPMB) << 20,
		InflightChanged:    mem.inflightFunc(),
		OutgoingChanged:    mem.outgoingFunc(),
		IPSetRefresh:       o.ipSetRefresh,
		IPSetURLs:          o.ipSetURLMap(),
	})
	if err := srv.ReportCanary(ctx); err != nil {
		return err
	}
	// The alert rules run on every replica; the one holding the
	// evaluator's lease evaluates and notifies.
	alerts := alert.New(st, ring, alert.Config{
		Interval: o.alertInterval, Resend: o.alertResend, Presence: presence, PublicURL: o.publicURL, SinkAllow: o.sinkAllow(),
		KeysOK: func(ctx context.Context) (bool, error) {
			cs, err := server.CheckCanary(ctx, st, ring)
			return cs.OK, err
		},
		Intake5xx: srv.Intake5xx,
	}, clock, log)
	srv.RegisterMetrics(alerts.Metrics().Collectors()...)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	_, httpsPort, _ := net.SplitHostPort(ln.Addr().String())
	tlsSetup, err := o.tlsSetup(httpsPort, log)
	if err != nil {
		return err
	}
	// The console, on the same listener: its cookie is Secure when the
	// cloud serves TLS or is reached over https.
	con := console.New(console.Deps{
		App: srv, Store: st, Clock: clock, Log: log,
		CSRFKey:      tokens.DerivedKey("console csrf"),
		SecureCookie: tlsSetup != nil || strings.HasPrefix(strings.ToLower(o.publicURL), "https://"),
		Volume:       console.ReceivedPerHour(st),
	})
	if w := plainHTTPWarning(&o, tlsSetup != nil); w != "" {
		log.Warn(w, "listen", o.listen, "public_url", o.publicURL)
	}
	srv.Mount(console.Path+"/", con.Routes, con.NotFound)
	handler := srv.Handler()
	if tlsSetup != nil {
		handler = tlsconf.HSTS(handler)
		if strings.HasPrefix(o.publicURL, "http://") {
			log.Warn("RELAY_PUBLIC_URL is http:// while the cloud serves HTTPS: the webhook URLs the admin API answers point at plain HTTP", "public_url", o.publicURL)
		}
	}
	httpSrv := server.NewHTTPServer(handler, server.DefaultTimeouts, slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	// Heartbeats waiting for work (wait_s) are answered at once on shutdown.
	httpSrv.RegisterOnShutdown(srv.StopWaiting)
	// The plain-HTTP listener only redirects (and answers ACME challenges):
	// its requests are small and short.
	var redirectSrv *http.Server
	var redirectLn net.Listener
	if o.httpRedirectListen != "" {
		redirectLn, err = net.Listen("tcp", o.httpRedirectListen)
		if err != nil {
			return fmt.Errorf("listen (RELAY_HTTP_REDIRECT_LISTEN): %w", err)
		}
		redirectSrv = &http.Server{
			Handler:           tlsSetup.HTTP,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       30 * time.Second,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
	}
	ln = mem.listener(srv.LimitConnsPerIP(ln, o.maxConnsPerIP))
	if redirectLn != nil {
		redirectLn = mem.listener(redirectLn)
	}

	sweepCtx, stopSweep := context.WithCancel(context.WithoutCancel(ctx))
	// Background upkeep runs on every replica: each job is safe to run at once.
	expire := sweep.ExpireLeases(st, delivery.DefaultRetryPolicy)
	expireLeases := expire.Do
	expire.Do = func(ctx context.Context, now time.Time) (int, error) {
		n, err := expireLeases(ctx, now)
		srv.ObserveLeaseExpiries(n)
		return n, err
	}
	sweeper := &sweep.Runner{Clock: clock, Log: log, Jobs: []sweep.Job{
		expire,
		sweep.Retention(append(sweep.DeliveryPruners(st, o.retainAcked, o.retainDLQ),
			sweep.Pruner{Name: "rejections", Retain: o.retainRejected, Prune: st.RejectionPrune})...),
		sweep.ExpireClaimCodes(st),
	}}
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); sweeper.Run(sweepCtx) }()
	releaseDone := make(chan struct{})
	go func() { defer close(releaseDone); srv.RunQuarantineRelease(sweepCtx, time.Minute) }()
	wakeDone := make(chan struct{})
	go func() { defer close(wakeDone); srv.RunWakeups(sweepCtx) }()
	ipSetsDone := make(chan struct{})
	go func() { defer close(ipSetsDone); srv.RunIPSetRefresh(sweepCtx) }()
	alertsDone := make(chan struct{})
	go func() { defer close(alertsDone); alerts.Run(sweepCtx) }()
	hupDone := make(chan struct{})
	go func() {
		defer close(hupDone)
		for {
			select {
			case <-sweepCtx.Done():
				return
			case <-hup:
				reloadKeys(sweepCtx, &o, srv, log)
				if tlsSetup != nil {
					if err := tlsSetup.Reload(); err != nil {
						log.Error("TLS certificate not reloaded: the previous one is kept", "err", err)
					}
				}
			}
		}
	}()

	errc := make(chan error, 2)
	if tlsSetup != nil {
		httpSrv.TLSConfig = tlsSetup.TLS
		go func() { errc <- httpSrv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- httpSrv.Serve(ln) }()
	}
	if redirectSrv != nil {
		go func() { errc <- redirectSrv.Serve(redirectLn) }()
		log.Info("redirecting plain HTTP to HTTPS", "addr", redirectLn.Addr().String())
	}
	log.Info("cloud listening", "addr", ln.Addr().String(), "tls", tlsMode(o), "database", redactURL(o.databaseURL), "version", buildinfo.Version(), "commit", buildinfo.Commit())

	select {
	case err := <-errc:
		stopSweep()
		<-sweepDone
		<-releaseDone
		<-wakeDone
		<-ipSetsDone
		<-alertsDone
		<-hupDone
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = httpSrv.Shutdown(shutCtx)
	// Sockets were told to close (StopWaiting) and release what they
	// pushed; the server's Shutdown does not wait for them.
	if werr := srv.WaitSockets(shutCtx); err == nil {
		err = werr
	}
	if redirectSrv != nil {
		_ = redirectSrv.Shutdown(shutCtx)
	}
	stopSweep()
	<-sweepDone
	<-releaseDone
	<-wakeDone
	<-ipSetsDone
	<-alertsDone
	<-hupDone
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// checkBudgets refuses an in-flight budget of no bytes (or of more than
// the address space).
func (o *options) checkBudgets() error {
	for _, b := range []struct {
		name string
		mb   int
	}{
		{"RELAY_INTAKE_INFLIGHT_MB", o.inflightMB},
		{"RELAY_INTAKE_INFLIGHT_HOST_MB", o.inflightHostMB},
		{"RELAY_INTAKE_INFLIGHT_IP_MB", o.inflightIPMB},
	} {
		if b.mb < 1 || b.mb > 1<<30 {
			return usageError{fmt.Errorf("%s=%d: want a whole number of MiB from 1 to %d", b.name, b.mb, 1<<30)}
		}
	}
	return nil
}

// loadRing builds the secret key ring from RELAY_SECRET_KEYS, from
// RELAY_SECRET_KEYS_FILE, or from the key file in the data dir (created on
// first use).
func loadRing(o *options) (*secrets.Ring, error) {
	if o.dataDir == "" {
		o.dataDir = "./data"
		if p, ok := strings.CutPrefix(o.databaseURL, "sqlite:"); ok {
			o.dataDir = filepath.Dir(strings.TrimPrefix(p, "//"))
		}
	}
	if o.secretKeys != "" {
		r, err := secrets.ParseRing(o.secretKeys)
		if err != nil {
			return nil, usageError{fmt.Errorf("RELAY_SECRET_KEYS: %w", err)}
		}
		return r, nil
	}
	if o.secretKeysFile != "" {
		r, err := readKeysFile(o.secretKeysFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("RELAY_SECRET_KEYS_FILE: %w", err)}
		}
		return r, nil
	}
	k, err := secrets.LoadOrCreateKeyFile(filepath.Join(o.dataDir, "secret.key"))
	if err != nil {
		return nil, err
	}
	return secrets.NewRing(k)
}

func loadJWTKey(o options) ([]byte, error) {
	if o.jwtKey != "" {
		if len(o.jwtKey) < 32 {
			return nil, usageError{errors.New("RELAY_JWT_KEY must be at least 32 bytes")}
		}
		return []byte(o.jwtKey), nil
	}
	return secrets.LoadOrCreateKeyFile(filepath.Join(o.dataDir, "jwt.key"))
}
