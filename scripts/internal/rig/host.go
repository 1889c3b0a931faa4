package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// HostConfig says how to claim and run `host run`.
type HostConfig struct {
	Bin       string         // the host binary (Bins.Host)
	CloudURL  string         // the cloud the host claims from and heartbeats
	ClaimCode string         // claimed into StateDir before the first start; empty: StateDir already holds a credential
	StateDir  string         // RELAY_HOST_STATE (credential, ledger); required
	Listen    string         // RELAY_HOST_LISTEN (local API); a free 127.0.0.1 port when empty
	Config    map[string]any // the config file; cloud_url and heartbeat_interval_s (1) are added unless set
	Env       []string       // more KEY=VALUE settings, after the ones above
	LogPath   string         // stdout and stderr; StateDir/host.log when empty
}

// Host is a running `host run`.
type Host struct {
	*Proc
	Cfg        HostConfig
	ConfigPath string // the written config file
	LocalURL   string // the local API, http://Listen
}

// ClaimHost runs `host claim --cloud URL --code CODE --state DIR`.
func ClaimHost(ctx context.Context, bin, cloudURL, code, stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, "claim", "--cloud", cloudURL, "--code", code, "--state", stateDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rig: host claim: %w\n%s", err, out)
	}
	return nil
}

// ForwardConfig is a host config with one enabled "github" source that
// forwards to url; parallel runs its webhooks concurrently on workers.
func ForwardConfig(url string, parallel bool, workers int) map[string]any {
	cfg := map[string]any{"webhooks": map[string]any{
		"github": map[string]any{"enabled": true, "forward": url, "parallel": parallel},
	}}
	if workers > 0 {
		cfg["workers"] = workers
	}
	return cfg
}

// StartHost claims the host (when ClaimCode is set), writes its config file
// into StateDir and starts `host run`, waiting (up to 30 s) until its local
// API answers.
func StartHost(ctx context.Context, cfg HostConfig) (*Host, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("rig: HostConfig.StateDir is required")
	}
	if cfg.ClaimCode != "" {
		if err := ClaimHost(ctx, cfg.Bin, cfg.CloudURL, cfg.ClaimCode, cfg.StateDir); err != nil {
			return nil, err
		}
	}
	if err := procDefaults(&cfg.Listen, &cfg.LogPath, cfg.StateDir, "host"); err != nil {
		return nil, err
	}
	file := map[string]any{"cloud_url": cfg.CloudURL, "heartbeat_interval_s": 1}
	for k, v := range cfg.Config {
		file[k] = v
	}
	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfg.StateDir, "config.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	env := append([]string{"RELAY_HOST_STATE=" + cfg.StateDir, "RELAY_HOST_LISTEN=" + cfg.Listen}, cfg.Env...)
	h := &Host{
		Proc: &Proc{Bin: cfg.Bin, Args: []string{"run", "--config", cfgPath}, Env: env, LogPath: cfg.LogPath,
			Ready: Readiness{Name: "host", URL: "http://" + cfg.Listen, Path: "/healthz", Within: 30 * time.Second}},
		Cfg:        cfg,
		ConfigPath: cfgPath,
		LocalURL:   "http://" + cfg.Listen,
	}
	if err := h.Launch(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// HostHealth is the host's /healthz answer.
type HostHealth struct {
	Status             string     `json:"status"`
	LastHeartbeatAt    *time.Time `json:"last_heartbeat_at"`
	LastHeartbeatError string     `json:"last_heartbeat_error"`
	Outbox             int        `json:"outbox"`
	Queued             int        `json:"queued"`
	Running            int        `json:"running"`
}

// Health reads the host's /healthz.
func (h *Host) Health(ctx context.Context) (HostHealth, error) {
	var out HostHealth
	req, err := http.NewRequestWithContext(ctx, "GET", h.LocalURL+"/healthz", nil)
	if err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

// Close stops the host: SIGTERM, then SIGKILL after 15 s (its default
// shutdown grace is 10 s).
func (h *Host) Close() error {
	return h.Stop(15 * time.Second)
}
