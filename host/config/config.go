// Package config reads the host's configuration file and its state directory
// (the credentials written by `host claim`), and resolves the settings that
// may come from a flag, an environment variable or a default.
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

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
