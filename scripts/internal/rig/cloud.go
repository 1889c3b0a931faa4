package rig

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// CloudConfig says how to run `cloud serve`.
type CloudConfig struct {
	Bin         string   // the cloud binary (Bins.Cloud)
	DatabaseURL string   // RELAY_DATABASE_URL: "sqlite:PATH" or a postgres URL
	DataDir     string   // RELAY_DATA_DIR, where key files go; required
	Listen      string   // RELAY_LISTEN; a free 127.0.0.1 port when empty
	AdminToken  string   // RELAY_ADMIN_TOKEN (at least 32 characters); "rig-admin-token-…" when empty
	PublicURL   string   // RELAY_PUBLIC_URL; http://Listen when empty
	Env         []string // more KEY=VALUE settings, after (and so over) the ones above
	LogPath     string   // stdout and stderr; DataDir/cloud.log when empty
	// ReadyWithin: how long StartCloud waits for /readyz; 60 s when 0.
	ReadyWithin time.Duration
}

// Cloud is a running `cloud serve`.
type Cloud struct {
	*Proc
	*Admin // the admin and host APIs of this cloud
	Cfg    CloudConfig
}

// StartCloud starts `cloud serve` and waits (up to ReadyWithin, 60 s by
// default) until /readyz answers 200.
func StartCloud(ctx context.Context, cfg CloudConfig) (*Cloud, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("rig: CloudConfig.DataDir is required")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	if err := procDefaults(&cfg.Listen, &cfg.LogPath, cfg.DataDir, "cloud"); err != nil {
		return nil, err
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = "rig-admin-token-of-at-least-32-characters"
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = "http://" + cfg.Listen
	}
	if cfg.ReadyWithin <= 0 {
		cfg.ReadyWithin = 60 * time.Second
	}
	env := append([]string{
		"RELAY_LISTEN=" + cfg.Listen,
		"RELAY_DATABASE_URL=" + cfg.DatabaseURL,
		"RELAY_ADMIN_TOKEN=" + cfg.AdminToken,
		"RELAY_PUBLIC_URL=" + cfg.PublicURL,
		"RELAY_DATA_DIR=" + cfg.DataDir,
	}, cfg.Env...)
	c := &Cloud{
		Proc: &Proc{Bin: cfg.Bin, Args: []string{"serve"}, Env: env, LogPath: cfg.LogPath,
			Ready: Readiness{Name: "cloud", URL: "http://" + cfg.Listen, Path: "/readyz", Within: cfg.ReadyWithin}},
		Admin: NewAdmin("http://"+cfg.Listen, cfg.AdminToken),
		Cfg:   cfg,
	}
	if err := c.Launch(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Close stops the cloud: SIGTERM, then SIGKILL after 10 s.
func (c *Cloud) Close() error {
	return c.Stop(10 * time.Second)
}

// Metric reads one unlabelled series (go_goroutines, process_open_fds, …)
// from the cloud's /metrics.
func (c *Cloud) Metric(ctx context.Context, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.Admin.URL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Admin.Token)
	resp, err := c.Admin.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("rig: GET /metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("rig: /metrics has no %s", name)
}
