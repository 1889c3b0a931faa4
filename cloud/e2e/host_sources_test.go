package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store"
	"github.com/relaykit/relay/shared"
)

// TestHostWarnsOfASourceTypo: a host whose configuration names "githb"
// while the cloud's source is "github" is warned — by `host run --check`
// (exit 0, the nearest name given) and in `host run`'s log at start — that
// the handler never runs and which name was meant; a webhook sent
// meanwhile is kept, shown with why the host skipped it, and replayed once
// the name is fixed.
func TestHostWarnsOfASourceTypo(t *testing.T) {
	t.Parallel()
	s := newHostSetup(t, "typo")
	state := s.claimInto(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "relay-host.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+s.cloud.url+`", "heartbeat_interval_s": 1,
		"webhooks": {"githb": {"enabled": true, "forward": "http://127.0.0.1:9/hook"}}}`), 0o600))

	check := exec.Command(filepath.Join(binDir, "host"), "run", "--check", "--config", cfg)
	check.Env = append(os.Environ(), "RELAY_HOST_STATE="+state)
	var stdout, stderr strings.Builder
	check.Stdout, check.Stderr = &stdout, &stderr
	err := check.Run()
	var ee *exec.ExitError
	require.False(t, errors.As(err, &ee), "a warning, not a failure: %v\n%s%s", err, stdout.String(), stderr.String())
	require.NoError(t, err)
	require.Contains(t, stdout.String(), "credential accepted by the cloud")
	require.Contains(t, stdout.String(), "sources: 2 differ from the cloud's")
	require.Contains(t, stderr.String(), `host run --check: warning: webhooks.githb: the cloud has no source "githb" for this host, so this handler never runs; did you mean "github"?`)
	require.Contains(t, stderr.String(), `host run --check: warning: the cloud's source "github" is enabled, and the host's configuration has no webhooks.github`)

	h := startHostIn(t, dir, state, "--config", cfg)
	eventually(t, 30*time.Second, "the warning in host run's log", func() bool {
		h.mustBeRunning()
		b, _ := os.ReadFile(h.logPath)
		return strings.Contains(string(b), `level=WARN msg="source differs from the cloud's" kind=not-in-cloud source=githb detail=`) &&
			strings.Contains(string(b), `nearest=github`)
	})

	// The console's host page shows the same, in a real browser.
	ctx := newBrowser(t)
	consoleLogin(t, ctx, s.cloud)
	do(t, ctx, "open the host's page", chromedp.Navigate(s.cloud.url+"/console/hosts/"+s.hostID),
		chromedp.WaitVisible(chromedp.CSS("#host-config .mismatch")))
	config := text(t, ctx, "#host-config")
	require.Contains(t, config, `githb: webhooks.githb: the cloud has no source "githb" for this host, so this handler never runs; did you mean "github"?`)
	require.Contains(t, config, `the cloud has no source "githb" for this host`)
	screenshot(t, ctx, "host-config-typo")

	// A real webhook to the cloud's github source meanwhile is not lost:
	// stored, handed to the host, skipped there with the reason, which
	// the cloud shows beside it, with a replay as the next action.
	payload := hostPayload(t, "github/pull_request.opened.json")
	id := sendGitHub(t, s.cloud.url, s.hostID, "pull_request", "typo-1", payload)
	eventually(t, 30*time.Second, "skipped by the host, acked", func() bool {
		d := s.cloud.delivery(s.hostID, id)
		return d.Delivery.Status == "acked" && d.HostResult != nil
	})
	d := s.cloud.delivery(s.hostID, id)
	require.Equal(t, "skipped", d.HostResult.Result)
	require.Contains(t, d.HostResult.Error, `this host's configuration has no source "github"`)
	inspect := ctlOK(t, s.cloud.url, "inspect", id)
	require.Contains(t, inspect, `host ledger  skipped at attempt 1`)
	require.Contains(t, inspect, "next_action  replay (retry-safe): acked")
	require.Contains(t, inspect, "cloud ctl deliveries replay "+id)

	// The name fixed and the configuration reloaded, the operator sends it
	// on: the handler runs it, told which delivery it replays.
	rc := startReceiver(t)
	require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+s.cloud.url+`", "heartbeat_interval_s": 1,
		"webhooks": {"github": {"enabled": true, "forward": "`+rc.url+`"}}}`), 0o600))
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGHUP))
	eventually(t, 30*time.Second, "the configuration reloaded", func() bool {
		b, _ := os.ReadFile(h.logPath)
		return strings.Contains(string(b), "configuration reloaded")
	})
	var replayed struct {
		Delivery struct {
			DeliveryID string `json:"delivery_id"`
			ReplayOf   string `json:"replay_of"`
		} `json:"delivery"`
	}
	ctlJSON(t, s.cloud.url, &replayed, "deliveries", "replay", id)
	require.Equal(t, id, replayed.Delivery.ReplayOf)
	rid := replayed.Delivery.DeliveryID
	eventually(t, 30*time.Second, "the replay run and acked", func() bool {
		return s.cloud.delivery(s.hostID, rid).Delivery.Status == "acked"
	})
	got := rc.snapshot()[rid]
	require.Len(t, got, 1, "run once, under its own idempotency key")
	require.Equal(t, payload, got[0].Body, "the body as the provider sent it")
	require.Equal(t, id, got[0].Header.Get("X-Relay-Replay-Of"))
	require.Equal(t, "typo-1", got[0].Header.Get("X-GitHub-Delivery"), "the provider's headers as sent")
	require.Equal(t, "success", s.cloud.delivery(s.hostID, rid).HostResult.Result)
	require.Contains(t, ctlOK(t, s.cloud.url, "inspect", id), "replayed as  "+rid)
}

// TestHostWarnsOfAFilterThatMatchesNothing: a source whose event filter an
// older cloud stored with an entry that matches no webhook ("pull_request.*":
// a "*" within an entry never matches, and the cloud now refuses to store
// one) answers those webhooks "filtered" and stores none. A host that handles
// the source is told so by `host run --check`, with the entry and its fix,
// and does not count the entry as passing its "pull_request".
func TestHostWarnsOfAFilterThatMatchesNothing(t *testing.T) {
	t.Parallel()
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "cloud.db")
	c := startCloud(t, dbURL)
	hostID, code := c.newHost("legacy filter", secret)
	// As an older cloud stored it: the API refuses the entry now.
	require.Equal(t, 400, c.admin("PATCH", "/api/hosts/"+hostID+"/sources/github",
		map[string]any{"events": []string{"pull_request.*", "push"}}, nil))
	ctx := context.Background()
	st := openStoreOf(t, dbURL)
	src, err := st.SourceGet(ctx, hostID, "github")
	require.NoError(t, err)
	_, err = st.SourceUpsert(ctx, &store.SourceUpsertParams{HostID: hostID, Name: src.Name, Provider: src.Provider, Enabled: true,
		Events: []string{"pull_request.*", "push"}, Secrets: src.Secrets, Options: src.Options, Now: time.Now()})
	require.NoError(t, err)
	payload := hostPayload(t, "github/pull_request.opened.json")
	status, resp, err := signGitHub(secret, "pull_request", "legacy-1", payload).send(c.url, hostID)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	require.Equal(t, shared.IntakeFiltered, resp.Status, "what the entry does: nothing passes it")

	state := claimHost(t, c.url, code)
	cfg := filepath.Join(t.TempDir(), "relay-host.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"cloud_url": "`+c.url+`",
		"webhooks": {"github": {"enabled": true, "events": ["pull_request", "push"], "forward": "http://127.0.0.1:9/hook"}}}`), 0o600))
	check := exec.Command(filepath.Join(binDir, "host"), "run", "--check", "--config", cfg)
	check.Env = append(os.Environ(), "RELAY_HOST_STATE="+state)
	var stdout, stderr strings.Builder
	check.Stdout, check.Stderr = &stdout, &stderr
	require.NoError(t, check.Run(), "a warning, not a failure:\n%s%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "sources: 2 differ from the cloud's")
	require.Contains(t, stderr.String(), `host run --check: warning: webhooks.github: the cloud's source "github" has event filter entries that match no webhook: pull_request.*`)
	require.Contains(t, stderr.String(), `the type alone ("pull_request") takes every action`)
	require.Contains(t, stderr.String(), `webhooks.github: the cloud's source "github" takes only pull_request.*, push, so it answers pull_request "filtered"`)
}
