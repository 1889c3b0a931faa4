package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ctlRun is one `cloud ctl` run: its exit code and output.
type ctlRun struct {
	code           int
	stdout, stderr string
}

// ctl runs `cloud ctl args…` against the cloud at url with the admin token in
// the environment (extra env entries replace it), stdin fed from in.
func ctl(t *testing.T, url, in string, env []string, args ...string) ctlRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "cloud"), append([]string{"ctl"}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"RELAY_URL=" + url, "RELAY_ADMIN_TOKEN=" + adminToken}, env...)...)
	cmd.Stdin = strings.NewReader(in)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := ctlRun{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}

// ok runs ctl and requires exit 0.
func ctlOK(t *testing.T, url string, args ...string) string {
	t.Helper()
	r := ctl(t, url, "", nil, args...)
	require.Equal(t, 0, r.code, "cloud ctl %v: %s%s", args, r.stdout, r.stderr)
	return r.stdout
}

// ctlJSON runs ctl with --json and decodes its output into out.
func ctlJSON(t *testing.T, url string, out any, args ...string) {
	t.Helper()
	s := ctlOK(t, url, append(args, "--json")...)
	require.NoError(t, json.Unmarshal([]byte(s), out), s)
}

// TestCtlCommands runs every `cloud ctl` management command against a real
// cloud on both stores: its table, its --json, and its errors.
func TestCtlCommands(t *testing.T) {
	t.Parallel()
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			c := startCloud(t, newDB(t))
			u := c.url

			// hosts
			out := ctlOK(t, u, "hosts", "create", "build box")
			require.Contains(t, out, "claim code")
			var created struct {
				ID        string `json:"id"`
				ClaimCode string `json:"claim_code"`
			}
			ctlJSON(t, u, &created, "hosts", "create", "edge box")
			require.NotEmpty(t, created.ClaimCode)
			id := created.ID

			out = ctlOK(t, u, "hosts", "list")
			require.Contains(t, out, "PRESENCE")
			require.Contains(t, out, "LAST CONTACT")
			require.Contains(t, out, "BACKLOG")
			require.Regexp(t, id+`\s+edge box\s+active\s+unclaimed\s+-\s+0\s+0`, out)
			var hosts struct {
				Hosts []struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"hosts"`
			}
			ctlJSON(t, u, &hosts, "hosts", "list")
			require.Len(t, hosts.Hosts, 2)
			// A page at a time: the first says where the next starts.
			out = ctlOK(t, u, "hosts", "list", "--limit", "1")
			require.Contains(t, out, "build box")
			require.NotContains(t, out, "edge box")
			more := regexp.MustCompile(`(?m)^more: --cursor (\S+)$`).FindStringSubmatch(out)
			require.NotNil(t, more, out)
			out = ctlOK(t, u, "hosts", "list", "--limit", "1", "--cursor", more[1])
			require.Contains(t, out, "edge box")
			require.NotContains(t, out, "more:")
			require.Contains(t, ctlOK(t, u, "hosts", "list", "--presence", "offline"), "ID")

			require.Contains(t, ctlOK(t, u, "hosts", "rename", id, "edge box 2"), "edge box 2")
			var h struct {
				Name      string `json:"name"`
				PerMin    int    `json:"rate_limit_per_min"`
				Burst     int    `json:"rate_limit_burst"`
				Status    string `json:"status"`
				LastHeart any    `json:"last_heartbeat_at"`
			}
			ctlJSON(t, u, &h, "hosts", "limits", id, "--per-min", "600", "--burst", "50")
			require.Equal(t, 600, h.PerMin)
			require.Equal(t, 50, h.Burst)
			ctlJSON(t, u, &h, "hosts", "show", id)
			require.Equal(t, "edge box 2", h.Name)
			require.Contains(t, ctlOK(t, u, "hosts", "show", id), "600/min, burst 50")

			// sources: the secret comes from stdin, never a flag
			r := ctl(t, u, secret+"\n", nil, "sources", "put", id, "github", "--secrets-file", "-",
				"--events", "push,pull_request", "--retry-schedule", "0,10,60", "--max-attempts", "4", "--json")
			require.Equal(t, 0, r.code, r.stderr)
			var src struct {
				Enabled      bool      `json:"enabled"`
				Events       []string  `json:"events"`
				Fingerprints []string  `json:"secret_fingerprints"`
				Schedule     []float64 `json:"retry_schedule_s"`
				MaxAttempts  int       `json:"max_attempts"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &src))
			require.Equal(t, []string{"push", "pull_request"}, src.Events)
			require.Len(t, src.Fingerprints, 1)
			require.Equal(t, []float64{0, 10, 60}, src.Schedule)
			require.NotContains(t, r.stdout, secret, "a secret is never printed")
			secretFile := filepath.Join(t.TempDir(), "secrets")
			require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\nsecond-secret\n"), 0o600))
			ctlOK(t, u, "sources", "put", id, "gh2", "--provider", "github", "--secrets-file", secretFile)

			ctlJSON(t, u, &src, "sources", "disable", id, "github")
			require.False(t, src.Enabled)
			require.Len(t, src.Fingerprints, 1, "the stored secret is kept")
			require.Equal(t, []string{"push", "pull_request"}, src.Events, "and the other settings")
			ctlJSON(t, u, &src, "sources", "enable", id, "github")
			require.True(t, src.Enabled)
			ctlJSON(t, u, &src, "sources", "events", id, "github", "pull_request", "push", "issues")
			require.Equal(t, []string{"pull_request", "push", "issues"}, src.Events)
			require.Equal(t, 4, src.MaxAttempts)
			out = ctlOK(t, u, "sources", "list", id)
			require.Regexp(t, `github\s+github\s+true\s+pull_request,push,issues\s+1`, out)
			require.Regexp(t, `gh2\s+github\s+true\s+\*\s+2`, out)
			require.Contains(t, ctlOK(t, u, "sources", "show", id, "github"), "0, 10, 60")

			// deliveries across hosts
			body := []byte(`{"action":"opened","number":7}`)
			st, resp, err := signGitHub(secret, "pull_request", "ctl-evt-1", body).send(u, id)
			require.NoError(t, err)
			require.Equal(t, 200, st)
			other, _ := c.newHost("other", secret)
			st, _, err = signGitHub(secret, "pull_request", "ctl-evt-1", body).send(u, other)
			require.NoError(t, err)
			require.Equal(t, 200, st)

			var page struct {
				Webhooks []struct {
					DeliveryID string `json:"delivery_id"`
					HostID     string `json:"host_id"`
					Status     string `json:"status"`
				} `json:"webhooks"`
				NextCursor string `json:"next_cursor"`
			}
			ctlJSON(t, u, &page, "deliveries", "list", "--event-id", "ctl-evt-1")
			require.Len(t, page.Webhooks, 2, "one event id on two hosts")
			ctlJSON(t, u, &page, "deliveries", "list", "--host", id, "--status", "queued", "--provider", "github", "--since", "1h")
			require.Len(t, page.Webhooks, 1)
			require.Equal(t, resp.DeliveryID, page.Webhooks[0].DeliveryID)
			ctlJSON(t, u, &page, "deliveries", "list", "--limit", "1")
			require.Len(t, page.Webhooks, 1)
			require.NotEmpty(t, page.NextCursor)
			ctlJSON(t, u, &page, "deliveries", "list", "--limit", "1", "--cursor", page.NextCursor)
			require.Len(t, page.Webhooks, 1)
			require.Empty(t, page.NextCursor)
			out = ctlOK(t, u, "deliveries", "list", "--status", "queued")
			require.Regexp(t, `DELIVERY\s+HOST\s+STATUS`, out)
			require.Contains(t, out, resp.DeliveryID)
			require.Contains(t, out, "pull_request.opened")

			// a queued delivery is not retried: a conflict
			r = ctl(t, u, "", nil, "deliveries", "retry", resp.DeliveryID)
			require.Equal(t, 5, r.code, r.stderr)
			require.Contains(t, r.stderr, "queued")
			require.Contains(t, ctlOK(t, u, "deliveries", "purge-dlq", id), "purged 0 dead letters")

			// rejections, quarantine
			bad := signGitHub("wrong-secret", "push", "ctl-bad", []byte(`{}`))
			st, _, err = bad.send(u, id)
			require.NoError(t, err)
			require.Equal(t, 401, st)
			out = ctlOK(t, u, "rejections", id)
			require.Regexp(t, `github\s+401`, out)
			require.Contains(t, ctlOK(t, u, "quarantine", "list"), "0 requests quarantined")
			require.Contains(t, ctlOK(t, u, "quarantine", "release"), "admitted 0, rejected 0, held 0")

			// alerts: rules, a host's setting, a sink whose URL comes from stdin
			out = ctlOK(t, u, "alerts", "rules")
			require.Regexp(t, `RULE\s+DEFAULT\s+PER HOST\s+SETTINGS`, out)
			require.Regexp(t, `oldest_pending\s+900 seconds\s+true`, out)
			require.Contains(t, ctlOK(t, u, "alerts", "set-rule", "oldest_pending", "--host", id, "--threshold", "300"), "rule oldest_pending set")
			require.Contains(t, ctlOK(t, u, "alerts", "rules"), id+": on at 300")
			require.Contains(t, ctlOK(t, u, "alerts", "reset-rule", "oldest_pending", "--host", id), "rule oldest_pending reset")
			require.NotContains(t, ctlOK(t, u, "alerts", "rules"), id+": on at 300")
			r = ctl(t, u, "https://ops.example.com/relay-alerts\n", nil, "alerts", "add-sink", "webhook", "--url-file", "-", "--json")
			require.Equal(t, 0, r.code, r.stderr)
			var sink struct {
				ID     string `json:"id"`
				Secret string `json:"secret"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &sink), r.stdout)
			require.NotEmpty(t, sink.Secret, "shown once")
			out = ctlOK(t, u, "alerts", "sinks")
			require.Regexp(t, sink.ID+`\s+webhook`, out)
			require.NotContains(t, out, sink.Secret)
			require.Contains(t, ctlOK(t, u, "alerts", "remove-sink", sink.ID), "removed")
			require.Regexp(t, `^\d+ firing`, ctlOK(t, u, "alerts", "list"))
			r = ctl(t, u, "", nil, "alerts", "remove-sink", sink.ID)
			require.Equal(t, 3, r.code, r.stderr)

			// claim code, deactivate
			require.Contains(t, ctlOK(t, u, "hosts", "claim-code", id), "claim code")
			ctlJSON(t, u, &h, "hosts", "deactivate", id)
			require.Equal(t, "deactivated", h.Status)

			// errors: clear messages, exit codes a script can rely on
			for _, e := range []struct {
				env  []string
				args []string
				code int
				want string
			}{
				{[]string{"RELAY_ADMIN_TOKEN=wrong-token-of-some-length-000000000"}, []string{"hosts", "list"}, 4, "missing or wrong admin token"},
				{[]string{"RELAY_ADMIN_TOKEN="}, []string{"hosts", "list"}, 2, "no admin token"},
				{[]string{"RELAY_ADMIN_TOKEN=", "RELAY_ADMIN_TOKEN_FILE=/nonexistent/token"}, []string{"hosts", "list"}, 2, "admin token file"},
				{nil, []string{"hosts", "show", "h_nope"}, 3, "no such host"},
				{nil, []string{"sources", "show", "h_nope", "github"}, 3, "no such source"},
				{nil, []string{"inspect", "no-such-thing"}, 3, `no delivery, event id or correlation id "no-such-thing"`},
				{nil, []string{"inspect", "ctl-evt-1"}, 2, `"ctl-evt-1" names 2 deliveries`},
				{nil, []string{"hosts", "list", "--bogus"}, 2, "flag provided but not defined: -bogus"},
				{nil, []string{"hosts", "show"}, 2, "usage: cloud ctl hosts show HOST_ID"},
				{nil, []string{"hosts", "limits", id}, 2, "give --per-min, --burst or both"},
				{nil, []string{"deliveries", "list", "--status", "lost"}, 2, `unknown status "lost"`},
				{nil, []string{"deliveries", "list", "--since", "yesterday"}, 2, `--since "yesterday"`},
				{nil, []string{"launch"}, 2, `unknown command "launch"`},
				{nil, []string{"hosts", "launch"}, 2, `unknown subcommand "launch"`},
				{nil, []string{"sources", "put", id, "github", "--secrets-file", "/nonexistent"}, 2, "--secrets-file"},
				{[]string{"RELAY_URL=http://127.0.0.1:1"}, []string{"hosts", "list"}, 1, "connection refused"},
				{[]string{"RELAY_URL=relay.example.com"}, []string{"hosts", "list"}, 2, `$RELAY_URL="relay.example.com": want http://… or https://…`},
			} {
				r := ctl(t, u, "", e.env, e.args...)
				require.Equal(t, e.code, r.code, "%v: %s%s", e.args, r.stdout, r.stderr)
				require.Contains(t, r.stderr, e.want, "%v", e.args)
				require.NotContains(t, r.stderr, adminToken, "the token is never printed")
			}
			// The token file works when the variable is unset.
			tokFile := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(tokFile, []byte(adminToken+"\n"), 0o600))
			r = ctl(t, u, "", []string{"RELAY_ADMIN_TOKEN="}, "hosts", "list", "--token-file", tokFile)
			require.Equal(t, 0, r.code, r.stderr)

			// -h on every command, no token needed
			for _, args := range [][]string{{"-h"}, {"hosts", "-h"}, {"hosts", "list", "-h"}, {"hosts", "show", "-h"},
				{"hosts", "create", "-h"}, {"hosts", "rename", "-h"}, {"hosts", "limits", "-h"}, {"hosts", "deactivate", "-h"},
				{"hosts", "claim-code", "-h"}, {"sources", "list", "-h"}, {"sources", "show", "-h"}, {"sources", "put", "-h"},
				{"sources", "enable", "-h"}, {"sources", "disable", "-h"}, {"sources", "events", "-h"},
				{"alerts", "list", "-h"}, {"alerts", "rules", "-h"}, {"alerts", "set-rule", "-h"}, {"alerts", "reset-rule", "-h"},
				{"alerts", "sinks", "-h"}, {"alerts", "add-sink", "-h"}, {"alerts", "remove-sink", "-h"},
				{"deliveries", "list", "-h"}, {"deliveries", "retry", "-h"}, {"deliveries", "purge-dlq", "-h"},
				{"inspect", "-h"}, {"tail", "-h"}, {"rejections", "-h"}, {"quarantine", "list", "-h"}, {"quarantine", "release", "-h"}} {
				r := ctl(t, u, "", []string{"RELAY_ADMIN_TOKEN="}, args...)
				require.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
				require.Contains(t, r.stdout, "usage: cloud ctl", "%v", args)
			}
		})
	}
}
