package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// withKeys restarts the cloud with RELAY_SECRET_KEYS set to keys.
func (c *cloud) withKeys(keys string) {
	c.t.Helper()
	c.env = append(c.env, "RELAY_SECRET_KEYS="+keys)
	c.restart()
}

// rekeyWith runs `cloud rekey` on the database with the given keys.
func rekeyWith(t *testing.T, dbURL, keys string) (string, error) {
	return rekey(dbURL, "RELAY_SECRET_KEYS="+keys)
}

// rekey runs `cloud rekey` on the database with keysEnv, the setting that
// names its keys (RELAY_SECRET_KEYS or RELAY_SECRET_KEYS_FILE).
func rekey(dbURL, keysEnv string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "cloud"), "rekey")
	cmd.Env = append(cmd.Environ(), "RELAY_DATABASE_URL="+dbURL, keysEnv)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestKeyRotation: secrets written under key 1; keys "2,1" and a rekey;
// keys "2" alone → every source still verifies. An unrelated key → 503 and
// quarantine; the right key back → the quarantined webhooks are delivered.
func TestKeyRotation(t *testing.T) {
	eachEngineParallel(t, keyRotation)
}

func keyRotation(t *testing.T, dbURL string) {
	k1, k2, unrelated := newKey(), newKey(), newKey()
	// A short lease: a heartbeat cut off by the cloud's SIGKILL leaves its
	// lease to run out before the webhook goes out again.
	c := startCloud(t, dbURL, "RELAY_SECRET_KEYS="+k1, "RELAY_LEASE=5s")
	const secret = "rotation-secret"
	hostID, code := c.newHost("rotation", secret)
	require.Equal(t, 201, c.admin("PUT", "/api/hosts/"+hostID+"/sources/internal",
		map[string]any{"provider": "generic", "secrets": []string{"generic-secret"}}, nil))
	rc := startReceiver(t)
	claimAndStartHost(t, c.url, code, rc.url, "internal")

	payloads := githubPayloads(t)
	n := 0
	send := func(wantStatus int) {
		t.Helper()
		p := payloads[n%len(payloads)]
		w := signGitHub(secret, p.event, "rot-"+itoa(n), p.body)
		n++
		status, _, err := w.send(c.url, hostID)
		require.NoError(t, err)
		require.Equal(t, wantStatus, status)
	}
	sendGeneric := func(wantStatus int) {
		t.Helper()
		body := []byte(`{"n":` + itoa(n) + `}`)
		n++
		h := map[string]string{"X-Event-Id": "gen-" + itoa(n), "X-Signature": "sha256=" + hexMAC(sha256.New, "generic-secret", string(body))}
		status := postRaw(t, c.url+"/api/webhooks/"+hostID+"/internal", body, h)
		require.Equal(t, wantStatus, status)
	}

	send(200)
	sendGeneric(202)
	// Delivered before the cloud stops: a heartbeat answer cut by the kill
	// would only come back after its lease and a retry delay.
	eventually(t, 30*time.Second, "2 deliveries", func() bool { return rc.count() == 2 })

	// Keys "2,1", then re-encrypt everything with key 2.
	c.kill()
	out, err := rekeyWith(t, dbURL, k2+","+k1)
	require.NoError(t, err, out)
	require.Contains(t, out, "re-encrypted 2 secrets in 2 of 2 sources")
	// Key 2 alone: every source verifies.
	c.withKeys(k2)
	send(200)
	sendGeneric(202)
	eventually(t, 30*time.Second, "4 deliveries", func() bool { return rc.count() == 4 })

	// An unrelated key: nothing decrypts; rekey refuses, the cloud quarantines.
	c.kill()
	out, err = rekeyWith(t, dbURL, unrelated)
	require.Error(t, err, "rekey with no key that opens the secrets fails")
	require.Contains(t, out, "no configured key decrypts")
	c.withKeys(unrelated)
	require.Contains(t, tail(c.logPath, 100000), "no key in RELAY_SECRET_KEYS decrypts the stored secrets", "the canary says so at start-up")
	send(503)
	sendGeneric(503)
	send(503)
	require.Len(t, c.deliveries(hostID, ""), 4, "nothing acknowledged, nothing queued")

	// The right key back: the quarantined requests are verified and delivered.
	c.withKeys(k2)
	eventually(t, 30*time.Second, "7 deliveries", func() bool { return rc.count() == 7 })
	for key, rs := range rc.snapshot() {
		require.Len(t, rs, 1, "delivered once: %s", key)
	}
	eventually(t, 30*time.Second, "7 acked", func() bool { return len(c.deliveries(hostID, "acked")) == 7 })
}

func postRaw(t *testing.T, url string, body []byte, headers map[string]string) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func itoa(n int) string { return strconv.Itoa(n) }
