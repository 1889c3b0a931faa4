package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/relaykit/relay/host/config"
)

// runHealth asks the running host's local API (GET /healthz) whether it is
// well: exit 0 when it says "ok", 1 when it is degraded (no heartbeat has
// succeeded for three intervals) or does not answer. The container image's
// health check, where there is no curl.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("health", stderr)
	listen := fs.String("listen", "", "the local API's address")
	if err := fs.Parse(args); err != nil {
		return flagExit(fs, err, stdout)
	}
	host, port, err := net.SplitHostPort(config.ListenAddr(*listen, getenv))
	if err != nil {
		fmt.Fprintf(stderr, "host health: --listen: %v\n", err)
		return exitUsage
	}
	// The local API answers requests addressed to loopback only.
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(host, port) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "host health: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "host health: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	var h struct {
		Status             string `json:"status"`
		LastHeartbeatError string `json:"last_heartbeat_error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil || resp.StatusCode != 200 {
		fmt.Fprintf(stderr, "host health: %s answered %s\n", url, resp.Status)
		return exitFailure
	}
	if h.Status != "ok" {
		fmt.Fprintf(stderr, "host health: %s (%s)\n", h.Status, h.LastHeartbeatError)
		return exitFailure
	}
	fmt.Fprintln(stdout, "ok")
	return exitOK
}
