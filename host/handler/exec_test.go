//go:build unix

package handler

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/host/summary"
)

func writeScript(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "handler.sh")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755))
	return path
}

func TestExecPassesPayloadAndEnvironment(t *testing.T) {
	// Not parallel: it sets the host's own environment.
	t.Setenv("RELAY_SLACK_CHANNEL", "inherited, must not leak")
	t.Setenv("RELAY_HOST_STATE", "/kept")
	dir := t.TempDir()
	script := writeScript(t, `cat > "$1/stdin"
env | grep -E '^(RELAY_(ATTEMPT|CORRELATION_ID|DELIVERY_ID|EVENT_[A-Z_]+|GITHUB_[A-Z_]+|SLACK_[A-Z_]+|STRIPE_[A-Z_]+|SOURCE|SUMMARY|HOST_STATE)=|IDEMPOTENCY_KEY=)' | sort > "$1/env"
echo handled
`)
	e, err := NewExec(ExecOptions{Argv: []string{script, dir}, Timeout: 10 * time.Second, RetryNonzeroExit: true})
	require.NoError(t, err)
	require.Equal(t, "exec handler.sh", e.Name())

	w := testWebhook("payload ✓ with\x00nul\n")
	w.EventAction = "opened"
	job := Job{Webhook: w, Summary: summary.Summary{Text: "pull_request.opened acme/app #7",
		Fields: map[string]string{"github.repo": "acme/app", "github.number": "7"}}}
	out := e.Handle(context.Background(), job)
	require.True(t, out.OK, out.Error)
	require.Equal(t, "handled", out.Output)
	require.Equal(t, 0, *out.ExitCode)

	stdin, err := os.ReadFile(filepath.Join(dir, "stdin"))
	require.NoError(t, err)
	require.Equal(t, w.RawBody, stdin)
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	require.NoError(t, err)
	require.Equal(t, strings.Join([]string{
		"IDEMPOTENCY_KEY=github:abc123:1707912345000",
		"RELAY_ATTEMPT=3",
		"RELAY_CORRELATION_ID=corr-1",
		"RELAY_DELIVERY_ID=github:abc123:1707912345000",
		"RELAY_EVENT_ACTION=opened",
		"RELAY_EVENT_TYPE=pull_request",
		"RELAY_GITHUB_NUMBER=7",
		"RELAY_GITHUB_REPO=acme/app",
		"RELAY_HOST_STATE=/kept",
		"RELAY_SOURCE=github",
		"RELAY_SUMMARY=pull_request.opened acme/app #7",
	}, "\n")+"\n", string(env))
}

func TestExecFailures(t *testing.T) {
	t.Parallel()
	script := writeScript(t, "echo 'reading payload'\necho 'bad payload' >&2\nexit 3\n")
	for _, retry := range []bool{true, false} {
		out := execOnce(t, ExecOptions{Argv: []string{script}, Timeout: 10 * time.Second, RetryNonzeroExit: retry})
		require.False(t, out.OK)
		require.Equal(t, retry, out.Retryable)
		require.Equal(t, "exit 3: bad payload", out.Error)
		require.Equal(t, 3, *out.ExitCode)
		require.Equal(t, "reading payload\nbad payload", out.Output, "stdout and stderr as written")
	}

	out := execOnce(t, ExecOptions{Argv: []string{filepath.Join(t.TempDir(), "missing")}, Timeout: time.Second})
	require.False(t, out.OK)
	require.True(t, out.Retryable)
	require.Nil(t, out.ExitCode)
	require.Contains(t, out.Error, "start:")
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The grandchild writes its pid and would outlive a kill of its parent
	// alone; killing the group takes it too.
	script := writeScript(t, `sleep 60 &
echo $! > "$1/child"
wait
`)
	out := execOnce(t, ExecOptions{Argv: []string{script, dir}, Timeout: 300 * time.Millisecond})
	require.False(t, out.OK)
	require.True(t, out.Retryable)
	require.Nil(t, out.ExitCode)
	require.Contains(t, out.Error, "timeout after 300ms")

	raw, err := os.ReadFile(filepath.Join(dir, "child"))
	require.NoError(t, err)
	pid := strings.TrimSpace(string(raw))
	// Once killed and reaped by init, /proc/<pid> disappears (or is a zombie).
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %s still running after the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecKeepsTheEndOfLongOutput(t *testing.T) {
	t.Parallel()
	script := writeScript(t, `i=0
while [ $i -lt 500 ]; do echo "line $i of some output"; i=$((i+1)); done
echo 'last words' >&2
exit 1
`)
	out := execOnce(t, ExecOptions{Argv: []string{script}, Timeout: 10 * time.Second})
	require.LessOrEqual(t, len(out.Output), MaxOutput+len("…"))
	require.True(t, strings.HasPrefix(out.Output, "…"))
	require.True(t, strings.HasSuffix(out.Output, "line 499 of some output\nlast words"))
	require.Equal(t, "exit 1: last words", out.Error)
}

// TestExecStartsWhateverTheWebhookCarries: a delivery id with a NUL and
// 200 KB of it, and a 200 KB summary, failed with "environment variable
// contains NUL" and "argument list too long"; the program now starts.
func TestExecStartsWhateverTheWebhookCarries(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := writeScript(t, `printf '%s' "$IDEMPOTENCY_KEY" > "$1/key"; echo ran`)
	e, err := NewExec(ExecOptions{Argv: []string{script, dir}, Timeout: 10 * time.Second})
	require.NoError(t, err)
	w := testWebhook(`{}`)
	w.DeliveryID = "github:evt_\x00x\ny" + strings.Repeat("d", 200<<10) + ":1"
	w.EventType = "push\x00"
	out := e.Handle(context.Background(), Job{Webhook: w, Summary: summary.Summary{Text: strings.Repeat("s", 200<<10)}})
	require.True(t, out.OK, out.Error)
	require.Equal(t, "ran", out.Output)
	key, err := os.ReadFile(filepath.Join(dir, "key"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(key), "github:evt_%00x%0Ay"), string(key[:40]))
	require.LessOrEqual(t, len(key), maxEnvValue)
}

// execOnce runs an exec handler made with opts on one webhook with an
// empty JSON object for its body.
func execOnce(t *testing.T, opts ExecOptions) Outcome {
	t.Helper()
	e, err := NewExec(opts)
	require.NoError(t, err)
	return e.Handle(context.Background(), Job{Webhook: testWebhook("{}")})
}
