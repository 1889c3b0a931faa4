// Package ctl is `cloud ctl`: the operator's command line over the cloud's
// admin API — hosts, groups, sources, deliveries, rejections, the
// quarantine — with tables for people, --json for scripts, and exit codes
// scripts can rely on.
package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/relaykit/relay/shared"
)

// Exit codes of every command.
const (
	ExitOK           = 0
	ExitFailed       = 1 // the cloud could not be reached, or failed
	ExitUsage        = 2 // a bad command, flag or argument
	ExitNotFound     = 3 // no such host, source or delivery
	ExitUnauthorized = 4 // no or wrong admin token
	ExitConflict     = 5 // the delivery is in a state the action does not apply to
)

// apiError is an error answer of the cloud.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, e.Code)
}

// usageError is a command used wrongly.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitCode is the exit code err calls for.
func exitCode(err error) int {
	var ue *usageError
	var ae *apiError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &ae):
		switch ae.Status {
		case 401:
			return ExitUnauthorized
		case 404, 410:
			return ExitNotFound
		case 409:
			return ExitConflict
		case 400:
			return ExitUsage
		}
	}
	return ExitFailed
}

// client calls the admin API.
type client struct {
	base  string
	token string
	http  *http.Client
}

// maxAnswer bounds an answer read from the cloud.
const maxAnswer = 64 << 20

// do sends a request with a JSON body (in, when not nil) and decodes the
// JSON answer into out (when not nil).
func (c *client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is said once, below
		}
		return fmt.Errorf("cloud at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e shared.ErrorResponse
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
			return &apiError{Status: resp.StatusCode, Code: "http", Message: strings.TrimSpace(string(b))}
		}
		return &apiError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, path, err)
	}
	return nil
}

func newClient(base, token string) *client {
	return &client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 60 * time.Second}}
}

// The admin API's shapes, as ctl reads them.

type host struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	Status          string     `json:"status"`
	Claimed         bool       `json:"claimed"`
	Presence        string     `json:"presence,omitempty"` // online, late or offline, as the cloud judges it
	AgentVersion    string     `json:"agent_version"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	RateLimitPerMin int        `json:"rate_limit_per_min"`
	RateLimitBurst  int        `json:"rate_limit_burst"`
	RateLimit       struct {
		PerMin int `json:"per_min"`
		Burst  int `json:"burst"`
	} `json:"rate_limit"`
	CreatedAt  time.Time      `json:"created_at"`
	Counts     map[string]int `json:"counts"`
	WebhookURL string         `json:"webhook_url"`
}

type event struct {
	ID         int64     `json:"id,omitempty"`
	DeliveryID string    `json:"delivery_id,omitempty"`
	HostID     string    `json:"host_id,omitempty"`
	Source     string    `json:"source,omitempty"`
	At         time.Time `json:"at"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Reason     string    `json:"reason"`
	Attempt    int       `json:"attempt"`
}

type deliveryPage struct {
	Webhooks   []shared.Delivery `json:"webhooks"`
	NextCursor string            `json:"next_cursor"`
}
