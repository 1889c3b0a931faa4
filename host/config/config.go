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
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/relaykit/relay/shared"
)

// Defaults of the host's settings.
const (
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultWorkers           = 4
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
	Webhooks          map[string]Source
}

// Source is one webhook source and its handler.
type Source struct {
	Enabled bool
	Events  []string // empty: every event
	Forward string   // URL, or ""
	Exec    []string // argv, or nil
	// Retry4xx says whether a 3xx/4xx answer (other than 429) of the forward
	// target is a retryable nack. Default true.
	Retry4xx bool
	// RetryNonzeroExit says whether a non-zero exit of the exec handler is a
	// retryable nack. Default true.
	RetryNonzeroExit bool
	ConnectTimeout   time.Duration
	Timeout          time.Duration
}

// HandlerKind names the source's handler: "forward", "exec" or "".
func (s Source) HandlerKind() string {
	switch {
	case s.Forward != "":
		return "forward"
	case len(s.Exec) > 0:
		return "exec"
	}
	return ""
}

// Subscription is the host's subscription sent with every heartbeat.
func (c *Config) Subscription() *shared.Subscription {
	sub := &shared.Subscription{Webhooks: make(map[string]shared.SourceSubscription, len(c.Webhooks))}
	for name, s := range c.Webhooks {
		sub.Webhooks[name] = shared.SourceSubscription{Enabled: s.Enabled, Events: s.Events}
	}
	return sub
}

// fileConfig is the file's JSON shape. Pointers tell "absent" from zero.
type fileConfig struct {
	CloudURL           string                `json:"cloud_url"`
	HeartbeatIntervalS *int                  `json:"heartbeat_interval_s"`
	Workers            *int                  `json:"workers"`
	Webhooks           map[string]fileSource `json:"webhooks"`
}

type fileSource struct {
	Enabled          bool     `json:"enabled"`
	Events           []string `json:"events"`
	Forward          string   `json:"forward"`
	Exec             []string `json:"exec"`
	Retry4xx         *bool    `json:"retry_4xx"`
	RetryNonzeroExit *bool    `json:"retry_nonzero_exit"`
	ConnectTimeoutS  *float64 `json:"connect_timeout_s"`
	TimeoutS         *float64 `json:"timeout_s"`
}

var sourceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Load reads and validates the configuration file at path. Relative exec
// programs (containing a slash, like "./scripts/x.sh") are resolved against
// the file's directory.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse validates a configuration file's contents; baseDir resolves relative
// exec programs.
func Parse(data []byte, baseDir string) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileConfig
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid JSON: unexpected data after the top-level object")
	}

	c := &Config{
		HeartbeatInterval: DefaultHeartbeatInterval,
		Workers:           DefaultWorkers,
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
	for name, fs := range f.Webhooks {
		s, err := parseSource(fs, baseDir)
		if err != nil {
			return nil, fmt.Errorf("webhooks.%s: %w", name, err)
		}
		if !sourceName.MatchString(name) {
			return nil, fmt.Errorf("webhooks: invalid source name %q (letters, digits, '.', '_', '-')", name)
		}
		c.Webhooks[name] = s
	}
	return c, nil
}

func parseSource(fs fileSource, baseDir string) (Source, error) {
	s := Source{
		Enabled:          fs.Enabled,
		Events:           fs.Events,
		Forward:          fs.Forward,
		Retry4xx:         true,
		RetryNonzeroExit: true,
		ConnectTimeout:   DefaultConnectTimeout,
		Timeout:          DefaultForwardTimeout,
	}
	for _, ev := range fs.Events {
		if strings.TrimSpace(ev) == "" {
			return Source{}, errors.New("events: empty event type")
		}
	}
	if fs.Forward != "" && fs.Exec != nil {
		return Source{}, errors.New("set only one of forward and exec")
	}
	if fs.Forward != "" {
		if err := CheckURL(fs.Forward); err != nil {
			return Source{}, fmt.Errorf("forward: %w", err)
		}
	}
	if fs.Exec != nil {
		if len(fs.Exec) == 0 || fs.Exec[0] == "" {
			return Source{}, errors.New("exec: needs a program as its first element")
		}
		argv := append([]string(nil), fs.Exec...)
		if !filepath.IsAbs(argv[0]) && strings.ContainsRune(argv[0], '/') {
			argv[0] = filepath.Join(baseDir, argv[0])
		}
		s.Exec = argv
		s.Timeout = DefaultExecTimeout
	}
	if fs.Enabled && s.HandlerKind() == "" {
		return Source{}, errors.New("enabled but has no handler: set forward or exec")
	}
	if fs.Retry4xx != nil {
		s.Retry4xx = *fs.Retry4xx
	}
	if fs.RetryNonzeroExit != nil {
		s.RetryNonzeroExit = *fs.RetryNonzeroExit
	}
	if fs.ConnectTimeoutS != nil {
		d, err := seconds(*fs.ConnectTimeoutS)
		if err != nil {
			return Source{}, fmt.Errorf("connect_timeout_s: %w", err)
		}
		s.ConnectTimeout = d
	}
	if fs.TimeoutS != nil {
		d, err := seconds(*fs.TimeoutS)
		if err != nil {
			return Source{}, fmt.Errorf("timeout_s: %w", err)
		}
		s.Timeout = d
	}
	return s, nil
}

func seconds(v float64) (time.Duration, error) {
	if v <= 0 || v > 24*3600 {
		return 0, fmt.Errorf("must be more than 0 and at most 86400, got %v", v)
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
