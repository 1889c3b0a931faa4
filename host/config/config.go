// Package config reads the host's configuration file and its state directory
// (the credentials written by `host claim`), and resolves the settings that
// may come from a flag, an environment variable or a default.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
)

// Defaults of the host's settings.
const (
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultWorkers           = 4
	DefaultMaxBackoff        = 30 * time.Second
	DefaultTransport         = "auto"
	DefaultShutdownGrace     = 10 * time.Second
	DefaultLedgerRetention   = 30 * 24 * time.Hour
	DefaultConnectTimeout    = 5 * time.Second
	DefaultForwardTimeout    = 30 * time.Second
	DefaultExecTimeout       = 10 * time.Minute
	DefaultListen            = "127.0.0.1:7071"
)

// Environment variables the host reads.
const (
	EnvState  = "RELAY_HOST_STATE"
	EnvListen = "RELAY_HOST_LISTEN"
)

// Config is a validated configuration file.
type Config struct {
	CloudURL          string // "" means: the one in credentials.json
	HeartbeatInterval time.Duration
	Workers           int
	MaxBackoff        time.Duration // cap of the delay between attempts to reach the cloud
	// Transport is how webhooks come: "auto" (the socket, heartbeats while
	// it cannot connect), "websocket" or "heartbeat".
	Transport string
	// Compress asks the cloud to compress what it sends: long-poll answers
	// as gzip-compressed JSON instead of the binary layout, and the socket
	// with permessage-deflate. Fewer bytes on a slow or metered link, for
	// CPU on both sides.
	Compress        bool
	ShutdownGrace   time.Duration // how long running handlers may finish on SIGTERM
	LedgerRetention time.Duration
	Webhooks        map[string]Source
}

// Source is one webhook source: which events the host wants and where each
// goes.
type Source struct {
	Enabled bool
	Events  []string // what the cloud sends; empty: every event
	// Parallel lets the source's webhooks run concurrently; by default they
	// run one at a time, in order.
	Parallel bool
	// Provider names the payload parser for summaries ("github", "stripe",
	// "slack", "none"); "" detects it.
	Provider string
	// Routes in order; the first whose events match runs. The source's own
	// forward or exec, if set, is the last route and matches every event.
	Routes []Route
}

// Route sends some of a source's events to a handler.
type Route struct {
	Events  []string // empty: every event
	Handler Handler
}

// Handler is one forward or exec handler with its options.
type Handler struct {
	Forward string   // URL, or ""
	Exec    []string // argv, or nil
	// Retry4xx says whether a 3xx/4xx answer (other than 429) of the forward
	// target is a retryable nack. Default true.
	Retry4xx bool
	// RetryNonzeroExit says whether a non-zero exit of the exec handler is a
	// retryable nack. Default true.
	RetryNonzeroExit bool
	ConnectTimeout   time.Duration // forward only
	Timeout          time.Duration
}

// Kind names the handler: "forward" or "exec".
func (h Handler) Kind() string {
	if h.Forward != "" {
		return "forward"
	}
	return "exec"
}

// Subscription is what the host tells the cloud it wants. A source with its
// own events list asks for those; one without asks for every event if it
// has a catch-all handler, else for the union of its routes' events.
func (c *Config) Subscription() *shared.Subscription {
	sub := &shared.Subscription{Webhooks: make(map[string]shared.SourceSubscription, len(c.Webhooks))}
	for name, s := range c.Webhooks {
		sub.Webhooks[name] = shared.SourceSubscription{Enabled: s.Enabled, Events: s.wanted()}
	}
	return sub
}

func (s Source) wanted() []string {
	if len(s.Events) > 0 {
		return s.Events
	}
	var union []string
	for _, r := range s.Routes {
		if len(r.Events) == 0 || slices.Contains(r.Events, "*") {
			return nil
		}
		for _, e := range r.Events {
			if !slices.Contains(union, e) {
				union = append(union, e)
			}
		}
	}
	return union
}

// The file's JSON shape. Pointers tell "absent" from zero.
type fileConfig struct {
	CloudURL            string                `json:"cloud_url"`
	HeartbeatIntervalS  *int                  `json:"heartbeat_interval_s"`
	Workers             *int                  `json:"workers"`
	MaxBackoffS         *float64              `json:"max_backoff_s"`
	Transport           *string               `json:"transport"`
	Compress            *bool                 `json:"compress"`
	ShutdownGraceS      *float64              `json:"shutdown_grace_s"`
	LedgerRetentionDays *int                  `json:"ledger_retention_days"`
	Webhooks            map[string]fileSource `json:"webhooks"`
}

type fileHandler struct {
	Forward          string   `json:"forward"`
	Exec             []string `json:"exec"`
	Retry4xx         *bool    `json:"retry_4xx"`
	RetryNonzeroExit *bool    `json:"retry_nonzero_exit"`
	ConnectTimeoutS  *float64 `json:"connect_timeout_s"`
	TimeoutS         *float64 `json:"timeout_s"`
}

type fileRoute struct {
	Events []string `json:"events"`
	fileHandler
}

type fileSource struct {
	Enabled  bool        `json:"enabled"`
	Events   []string    `json:"events"`
	Parallel bool        `json:"parallel"`
	Provider string      `json:"provider"`
	Routes   []fileRoute `json:"routes"`
	fileHandler
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Load reads and validates the configuration file at path. A relative
// exec program (one with a path separator: "./x.sh", "scripts/x.sh",
// "../bin/x") is resolved against the file's directory, made absolute, so
// it does not depend on the directory the host was started in; a bare
// name ("python3") is looked up in $PATH when it runs. The program of
// every enabled source's exec handlers must exist and be executable.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c, err := parse(data, dir, CheckProgram)
	var se *syntaxError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("%s:%d:%d: %s", path, se.line, se.col, se.msg)
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse validates a configuration file's contents; baseDir resolves relative
// exec programs (and should be absolute). Errors name the offending key by
// its path ("webhooks.github.routes[1].exec"). It does not look at the
// programs themselves: Load does.
func Parse(data []byte, baseDir string) (*Config, error) {
	return parse(data, baseDir, nil)
}

// syntaxError is JSON that does not parse (or a value encoding/json
// refuses), at a line and column of the file (both from 1).
type syntaxError struct {
	line, col int
	msg       string
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("line %d, column %d: %s", e.line, e.col, e.msg)
}

// jsonError places a decoding error of data at its line and column, when
// encoding/json says where (a syntax error, a value of the wrong type).
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var offset int64
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		offset = int64(len(data)) + 1 // just past the end
	case errors.Is(err, io.EOF):
		return errors.New("invalid JSON: the file is empty")
	default:
		return fmt.Errorf("invalid JSON: %w", err)
	}
	line, col := position(data, offset)
	msg := "invalid JSON: " + err.Error()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "invalid JSON: the file ends before the JSON does"
	}
	if typ != nil {
		msg = "invalid configuration: " + err.Error()
	}
	return &syntaxError{line: line, col: col, msg: msg}
}

// position is the line and column (from 1, the column in characters) of
// the byte before offset in data: encoding/json's offsets count the bytes
// read, up to and including the one that went wrong.
func position(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 1), int64(len(data))+1)
	before := data[:offset-1]
	line = 1 + bytes.Count(before, []byte("\n"))
	start := bytes.LastIndexByte(before, '\n') + 1
	col = 1 + utf8.RuneCount(before[start:])
	return line, col
}

func parse(data []byte, baseDir string, checkProgram func(string) error) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, jsonError(data, err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		rest := data[end:]
		at := end + int64(len(rest)-len(bytes.TrimLeft(rest, " \t\r\n")))
		line, col := position(data, at+1)
		return nil, &syntaxError{line: line, col: col, msg: "invalid JSON: unexpected data after the top-level object"}
	}
	if err := fileSchema.check("", raw); err != nil {
		return nil, err
	}
	// The shape is known good: this decode cannot fail on types or keys.
	strict := json.NewDecoder(bytes.NewReader(data))
	strict.DisallowUnknownFields()
	var f fileConfig
	if err := strict.Decode(&f); err != nil {
		return nil, jsonError(data, err)
	}

	c := &Config{
		HeartbeatInterval: DefaultHeartbeatInterval,
		Workers:           DefaultWorkers,
		MaxBackoff:        DefaultMaxBackoff,
		Transport:         DefaultTransport,
		ShutdownGrace:     DefaultShutdownGrace,
		LedgerRetention:   DefaultLedgerRetention,
		Webhooks:          make(map[string]Source, len(f.Webhooks)),
	}
	if f.CloudURL != "" {
		if err := CheckURL(f.CloudURL); err != nil {
			return nil, fmt.Errorf("cloud_url: %w", err)
		}
		c.CloudURL = strings.TrimRight(f.CloudURL, "/")
	}
	if f.HeartbeatIntervalS != nil {
		if *f.HeartbeatIntervalS < 1 || *f.HeartbeatIntervalS > 3600 {
			return nil, fmt.Errorf("heartbeat_interval_s: must be between 1 and 3600, got %d", *f.HeartbeatIntervalS)
		}
		c.HeartbeatInterval = time.Duration(*f.HeartbeatIntervalS) * time.Second
	}
	if f.Workers != nil {
		if *f.Workers < 1 || *f.Workers > 256 {
			return nil, fmt.Errorf("workers: must be between 1 and 256, got %d", *f.Workers)
		}
		c.Workers = *f.Workers
	}
	if f.MaxBackoffS != nil {
		d, err := seconds(*f.MaxBackoffS, 3600)
		if err != nil {
			return nil, fmt.Errorf("max_backoff_s: %w", err)
		}
		c.MaxBackoff = max(d, time.Second)
	}
	if f.Transport != nil {
		switch *f.Transport {
		case "auto", "websocket", "heartbeat":
			c.Transport = *f.Transport
		default:
			return nil, fmt.Errorf("transport: must be auto, websocket or heartbeat, got %q", *f.Transport)
		}
	}
	if f.Compress != nil {
		c.Compress = *f.Compress
	}
	if f.ShutdownGraceS != nil {
		d, err := seconds(*f.ShutdownGraceS, 24*3600)
		if err != nil {
			return nil, fmt.Errorf("shutdown_grace_s: %w", err)
		}
		c.ShutdownGrace = d
	}
	if f.LedgerRetentionDays != nil {
		if *f.LedgerRetentionDays < 1 || *f.LedgerRetentionDays > 3650 {
			return nil, fmt.Errorf("ledger_retention_days: must be between 1 and 3650, got %d", *f.LedgerRetentionDays)
		}
		c.LedgerRetention = time.Duration(*f.LedgerRetentionDays) * 24 * time.Hour
	}
	names := make([]string, 0, len(f.Webhooks))
	for name := range f.Webhooks {
		names = append(names, name)
	}
	slices.Sort(names) // the first error reported is the same on every run
	for _, name := range names {
		if !sourceName.MatchString(name) {
			return nil, fmt.Errorf("webhooks: invalid source name %q (letters, digits, '.', '_', '-'; at most 64)", name)
		}
		s, err := parseSource(f.Webhooks[name], baseDir, checkProgram)
		if err != nil {
			return nil, prefixPath("webhooks."+name, err)
		}
		c.Webhooks[name] = s
	}
	return c, nil
}

// pathError is an error at a key below a source; its message starts with the
// key's path, so callers prefix it with "webhooks.NAME.".
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
func (e *pathError) Unwrap() error { return e.err }

func at(path string, err error) error { return &pathError{path: path, err: err} }

// parseSource validates one source; checkProgram, when set, checks the
// programs of an enabled source's exec handlers.
func parseSource(fs fileSource, baseDir string, checkProgram func(string) error) (Source, error) {
	if !fs.Enabled {
		checkProgram = nil // its handlers never run
	}
	s := Source{Enabled: fs.Enabled, Events: fs.Events, Parallel: fs.Parallel, Provider: fs.Provider}
	if fs.Provider != "" && !summary.Known(fs.Provider) {
		return Source{}, at("provider", fmt.Errorf("unknown payload parser %q (github, stripe, slack or none)", fs.Provider))
	}
	if err := checkEvents("events", fs.Events); err != nil {
		return Source{}, err
	}
	kinds := map[string]bool{}
	for i, fr := range fs.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		if len(fr.Events) == 0 {
			return Source{}, at(path+".events", errors.New(`a route needs its events (["*"] for every event)`))
		}
		if err := checkEvents(path+".events", fr.Events); err != nil {
			return Source{}, err
		}
		if len(fs.Events) > 0 {
			for j, e := range fr.Events {
				if !coveredBy(fs.Events, e) {
					return Source{}, at(fmt.Sprintf("%s.events[%d]", path, j), fmt.Errorf("%q is not in the source's events, so it never arrives", e))
				}
			}
		}
		if !fr.set() {
			return Source{}, at(path, errors.New("a route needs a handler: set forward or exec"))
		}
		h, err := parseHandler(fr.fileHandler, fs.fileHandler, baseDir, true, checkProgram)
		if err != nil {
			return Source{}, prefixPath(path, err)
		}
		kinds[h.Kind()] = true
		s.Routes = append(s.Routes, Route{Events: fr.Events, Handler: h})
	}
	if fs.fileHandler.set() {
		// The source's own options also serve as its routes' defaults, so
		// they need only apply to some handler of the source.
		h, err := parseHandler(fs.fileHandler, fileHandler{}, baseDir, false, checkProgram)
		if err != nil {
			return Source{}, err
		}
		kinds[h.Kind()] = true
		s.Routes = append(s.Routes, Route{Handler: h})
	}
	if err := fs.fileHandler.optionsApply(kinds); err != nil {
		return Source{}, err
	}
	if fs.Enabled && len(s.Routes) == 0 {
		return Source{}, errors.New("enabled but has no handler: set forward, exec or routes")
	}
	return s, nil
}

// prefixPath puts path in front of a pathError's path (or makes one).
func prefixPath(path string, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		return &pathError{path: path + "." + pe.path, err: pe.err}
	}
	return at(path, err)
}

// set reports whether h names a handler (forward or exec).
func (h fileHandler) set() bool { return h.Forward != "" || h.Exec != nil }

// optionsApply checks that a source's options apply to some handler of the
// source (its own or its routes').
func (h fileHandler) optionsApply(kinds map[string]bool) error {
	if h.Retry4xx != nil && !kinds["forward"] {
		return at("retry_4xx", errors.New("applies to forward handlers, and this source has none"))
	}
	if h.ConnectTimeoutS != nil && !kinds["forward"] {
		return at("connect_timeout_s", errors.New("applies to forward handlers, and this source has none"))
	}
	if h.RetryNonzeroExit != nil && !kinds["exec"] {
		return at("retry_nonzero_exit", errors.New("applies to exec handlers, and this source has none"))
	}
	return nil
}

// parseHandler validates h; options h leaves unset come from defaults (the
// source's, for a route), else from the handler kind's defaults. strict
// refuses options of the other handler kind; checkProgram, when set,
// checks an exec handler's program.
func parseHandler(h, defaults fileHandler, baseDir string, strict bool, checkProgram func(string) error) (Handler, error) {
	if h.Forward != "" && h.Exec != nil {
		return Handler{}, errors.New("set only one of forward and exec")
	}
	out := Handler{Retry4xx: true, RetryNonzeroExit: true, ConnectTimeout: DefaultConnectTimeout}
	if h.Forward != "" {
		if err := CheckURL(h.Forward); err != nil {
			return Handler{}, at("forward", err)
		}
		if strict && h.RetryNonzeroExit != nil {
			return Handler{}, at("retry_nonzero_exit", errors.New("applies to exec handlers, not forward"))
		}
		out.Forward, out.Timeout = h.Forward, DefaultForwardTimeout
	} else {
		if len(h.Exec) == 0 || h.Exec[0] == "" {
			return Handler{}, at("exec", errors.New(`needs a program as its first element: ["./script.sh", "arg"]`))
		}
		if strict && h.Retry4xx != nil {
			return Handler{}, at("retry_4xx", errors.New("applies to forward handlers, not exec"))
		}
		if strict && h.ConnectTimeoutS != nil {
			return Handler{}, at("connect_timeout_s", errors.New("applies to forward handlers, not exec"))
		}
		argv := slices.Clone(h.Exec)
		argv[0] = ResolveProgram(argv[0], baseDir)
		if checkProgram != nil {
			if err := checkProgram(argv[0]); err != nil {
				if argv[0] != h.Exec[0] {
					err = fmt.Errorf("%q (%s): %w", h.Exec[0], argv[0], err)
				} else {
					err = fmt.Errorf("%q: %w", h.Exec[0], err)
				}
				return Handler{}, at("exec", err)
			}
		}
		out.Exec, out.Timeout = argv, DefaultExecTimeout
	}
	pick := func(own, def *float64) *float64 {
		if own != nil {
			return own
		}
		return def
	}
	if v := pick(h.ConnectTimeoutS, defaults.ConnectTimeoutS); v != nil {
		d, err := seconds(*v, 24*3600)
		if err != nil {
			return Handler{}, at("connect_timeout_s", err)
		}
		out.ConnectTimeout = d
	}
	if v := pick(h.TimeoutS, defaults.TimeoutS); v != nil {
		d, err := seconds(*v, 24*3600)
		if err != nil {
			return Handler{}, at("timeout_s", err)
		}
		out.Timeout = d
	}
	for _, b := range []struct {
		own, def *bool
		dst      *bool
	}{{h.Retry4xx, defaults.Retry4xx, &out.Retry4xx}, {h.RetryNonzeroExit, defaults.RetryNonzeroExit, &out.RetryNonzeroExit}} {
		if b.own != nil {
			*b.dst = *b.own
		} else if b.def != nil {
			*b.dst = *b.def
		}
	}
	return out, nil
}

// ResolveProgram is where an exec program runs from: a relative path with
// a separator ("./x.sh", "scripts/x.sh", "../bin/x") joined to baseDir
// (the configuration file's directory), an absolute path as it is, and a
// bare name ("python3") as it is, for $PATH to find when it runs.
func ResolveProgram(program, baseDir string) string {
	if filepath.IsAbs(program) || bare(program) {
		return program
	}
	return filepath.Join(baseDir, program)
}

// bare reports whether a program is a name alone, without a directory.
func bare(program string) bool {
	return !strings.ContainsRune(program, '/') && !strings.ContainsRune(program, filepath.Separator)
}

// CheckProgram says why a resolved exec program could not run: a path
// that does not exist, is a directory or is not executable, or a bare name
// that $PATH does not hold.
func CheckProgram(program string) error {
	if bare(program) {
		if _, err := exec.LookPath(program); err != nil {
			return fmt.Errorf(`not found in $PATH (a program without a "/" is looked up in $PATH; write "./%s" for one beside the configuration file)`, program)
		}
		return nil
	}
	st, err := os.Stat(program)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errors.New("no such file (a relative program is resolved against the configuration file's directory)")
	case err != nil:
		return err
	case st.IsDir():
		return errors.New("is a directory, not a program")
	case st.Mode().Perm()&0o111 == 0:
		return errors.New("is not executable (chmod +x it)")
	}
	return nil
}

// eventName is an event type, optionally with its action after a dot
// ("pull_request", "pull_request.opened", "invoice.payment_failed").
var eventName = regexp.MustCompile(`^[A-Za-z0-9_:/-]+(\.[A-Za-z0-9_:/-]+)*$`)

// checkEvents validates the event names of the list at path.
func checkEvents(path string, events []string) error {
	for i, e := range events {
		var err error
		switch {
		case e == "*":
		case strings.TrimSpace(e) == "":
			err = errors.New("empty event name")
		case strings.Contains(e, "*"):
			err = fmt.Errorf(`invalid event name %q: the only wildcard is "*" on its own (a type alone, like "pull_request", already matches every action)`, e)
		case len(e) > 200 || !eventName.MatchString(e):
			err = fmt.Errorf(`invalid event name %q: letters, digits, "_", "-", ":" or "/", in parts separated by single dots`, e)
		}
		if err != nil {
			return at(fmt.Sprintf("%s[%d]", path, i), err)
		}
	}
	return nil
}

// coveredBy reports whether event e of a route can pass the source's events:
// listed itself, as its type, or under "*".
func coveredBy(sourceEvents []string, e string) bool {
	typ, _, _ := strings.Cut(e, ".")
	return slices.Contains(sourceEvents, "*") || slices.Contains(sourceEvents, e) || slices.Contains(sourceEvents, typ) ||
		slices.ContainsFunc(sourceEvents, func(s string) bool { return strings.HasPrefix(s, e+".") })
}

func seconds(v float64, maxS float64) (time.Duration, error) {
	if v <= 0 || v > maxS {
		return 0, fmt.Errorf("must be more than 0 and at most %v, got %v", maxS, v)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// CheckURL accepts an absolute http or https URL with a host.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("invalid URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("invalid URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("invalid URL %q: no host", raw)
	}
	return nil
}

// StateDir resolves the state directory: the flag, else $RELAY_HOST_STATE,
// else ~/.relay-host.
func StateDir(flag string, getenv func(string) string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if v := getenv(EnvState); v != "" {
		return v, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find state directory: %w (set --state or %s)", err, EnvState)
	}
	return filepath.Join(home, ".relay-host"), nil
}

// ListenAddr resolves the local API address: the flag, else
// $RELAY_HOST_LISTEN, else 127.0.0.1:7071.
func ListenAddr(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if v := getenv(EnvListen); v != "" {
		return v
	}
	return DefaultListen
}
