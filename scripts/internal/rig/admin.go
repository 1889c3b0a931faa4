package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/relaykit/relay/shared"
)

// Admin calls a cloud's HTTP API: the admin API with its bearer token, and
// the host API (claim, heartbeat) with a host's credentials.
type Admin struct {
	URL    string // the cloud's base URL, http://127.0.0.1:PORT
	Token  string // RELAY_ADMIN_TOKEN
	Client *http.Client
}

// NewAdmin returns an Admin for the cloud at baseURL with its own client.
func NewAdmin(baseURL, token string) *Admin {
	return &Admin{URL: baseURL, Token: token, Client: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second},
	}}
}

// StatusError is an answer with an unexpected HTTP status.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("rig: %s %s: status %d: %s", e.Method, e.Path, e.Status, e.Body)
}

// Do calls the admin API with in as JSON (if not nil) and decodes a 2xx
// answer into out (if not nil). Any other status is a *StatusError.
func (a *Admin) Do(ctx context.Context, method, path string, in, out any) error {
	return a.do(ctx, method, path, "Bearer "+a.Token, in, out)
}

func (a *Admin) do(ctx context.Context, method, path, auth string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, body)
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("rig: %s %s: decode %q: %w", method, path, b, err)
		}
	}
	return nil
}

// CreateHost creates a host and returns its id and one-time claim code.
func (a *Admin) CreateHost(ctx context.Context, name string) (shared.CreateHostResponse, error) {
	var h shared.CreateHostResponse
	err := a.Do(ctx, "POST", shared.PathHosts, shared.CreateHostRequest{Name: name}, &h)
	return h, err
}

// PutSource configures (replaces) a host's source; spec is the JSON body of
// PUT /api/hosts/:id/sources/:source ("provider", "secrets", "events",
// "retry_schedule_s", …).
func (a *Admin) PutSource(ctx context.Context, hostID, source string, spec map[string]any) error {
	return a.Do(ctx, "PUT", "/api/hosts/"+hostID+"/sources/"+source, spec, nil)
}

// PutGitHubSource configures the host's "github" source with one secret.
func (a *Admin) PutGitHubSource(ctx context.Context, hostID, secret string) error {
	// The bench and the soak send each real payload under many delivery
	// ids: the replay guard would hold all but the first.
	return a.PutSource(ctx, hostID, "github", map[string]any{"provider": "github", "secrets": []string{secret},
		"options": map[string]string{"replay_guard": "off"}})
}

// SetRateLimit sets a host's own intake rate limit (0: the cloud's default).
func (a *Admin) SetRateLimit(ctx context.Context, hostID string, perMin, burst int) error {
	return a.Do(ctx, "PATCH", "/api/hosts/"+hostID, map[string]int{"rate_limit_per_min": perMin, "rate_limit_burst": burst}, nil)
}

// HostInfo is a host as GET /api/hosts/:id shows it.
type HostInfo struct {
	ID              string         `json:"id"`
	Name            string         `json:"name"`
	Status          string         `json:"status"`
	Claimed         bool           `json:"claimed"`
	LastHeartbeatAt *time.Time     `json:"last_heartbeat_at"`
	RateLimitPerMin int            `json:"rate_limit_per_min"`
	RateLimitBurst  int            `json:"rate_limit_burst"`
	Counts          map[string]int `json:"counts"` // deliveries by status: queued, delivering, delivered, acked, retrying, dlq
}

// Host reads one host with its delivery counts.
func (a *Admin) Host(ctx context.Context, hostID string) (HostInfo, error) {
	var h HostInfo
	err := a.Do(ctx, "GET", "/api/hosts/"+hostID, nil, &h)
	return h, err
}

// Counts returns the host's deliveries counted by status.
func (a *Admin) Counts(ctx context.Context, hostID string) (map[string]int, error) {
	h, err := a.Host(ctx, hostID)
	return h.Counts, err
}

// Delivery is one delivery as the admin API lists it.
type Delivery struct {
	DeliveryID string `json:"delivery_id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
	EventType  string `json:"event_type"`
	LastError  string `json:"last_error"`
}

// Deliveries lists every delivery of a host (status "" for all), following
// the cursors.
func (a *Admin) Deliveries(ctx context.Context, hostID, status string) ([]Delivery, error) {
	var all []Delivery
	cursor := ""
	for {
		q := url.Values{"limit": {"500"}}
		if status != "" {
			q.Set("status", status)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Webhooks   []Delivery `json:"webhooks"`
			NextCursor string     `json:"next_cursor"`
		}
		if err := a.Do(ctx, "GET", "/api/hosts/"+hostID+"/webhooks?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Webhooks...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

// Claim exchanges a claim code for a host credential and token, as
// `host claim` does (no admin token needed).
func (a *Admin) Claim(ctx context.Context, code string) (shared.ClaimResponse, error) {
	var r shared.ClaimResponse
	err := a.do(ctx, "POST", shared.PathClaim, "", shared.ClaimRequest{ClaimCode: code, AgentVersion: "rig"}, &r)
	return r, err
}

// RenewToken exchanges a host credential for a fresh token.
func (a *Admin) RenewToken(ctx context.Context, hostID, credential string) (shared.TokenResponse, error) {
	var r shared.TokenResponse
	err := a.do(ctx, "POST", shared.PathToken, "", shared.TokenRequest{HostID: hostID, HostCredential: credential}, &r)
	return r, err
}

// Heartbeat sends one heartbeat with a host token, as a host would.
func (a *Admin) Heartbeat(ctx context.Context, token string, req shared.HeartbeatRequest) (shared.HeartbeatResponse, error) {
	var r shared.HeartbeatResponse
	err := a.do(ctx, "POST", shared.PathHeartbeat, "Bearer "+token, req, &r)
	return r, err
}
