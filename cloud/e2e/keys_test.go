package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// TestKeyReloadOnSIGHUP: `cloud serve` reads RELAY_SECRET_KEYS_FILE again on
// SIGHUP. Keys "2,1" in the file and a rekey while the cloud runs with key 1
// alone: the next webhook is quarantined (the cloud cannot open its
// source's secret). SIGHUP: the quarantined webhook is released at once and
// the next one admitted; key 1 dropped from the file and SIGHUP: still
// admitted. A file that no longer parses leaves the running keys in place.
func TestKeyReloadOnSIGHUP(t *testing.T) {
	eachEngineParallel(t, keyReload)
}

func keyReload(t *testing.T, dbURL string) {
	k1, k2 := newKey(), newKey()
	keysFile := filepath.Join(t.TempDir(), "secret-keys")
	writeKeys := func(keys ...string) {
		t.Helper()
		require.NoError(t, os.WriteFile(keysFile, []byte(strings.Join(keys, "\n")+"\n"), 0o600))
	}
	writeKeys(k1)
	c := startCloud(t, dbURL, "RELAY_SECRET_KEYS_FILE="+keysFile)
	const secret = "reload-secret"
	hostID, _ := c.newHost("reload", secret)
	n := 0
	send := func() int {
		t.Helper()
		p := githubPayloads(t)[0]
		n++
		status, _, err := signGitHub(secret, p.event, "reload-"+itoa(n), p.body).send(c.url, hostID)
		require.NoError(t, err)
		return status
	}
	reloads := func() int { return strings.Count(tail(c.logPath, 100000), "secret keys reloaded") }
	hup := func() {
		t.Helper()
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGHUP))
	}

	// The new key first, the old one after it; every secret re-sealed with
	// the new key by `cloud rekey` while the cloud still holds key 1 alone.
	writeKeys(k2, k1)
	out, err := rekey(dbURL, "RELAY_SECRET_KEYS_FILE="+keysFile)
	require.NoError(t, err, out)
	require.Contains(t, out, "re-encrypted 1 secrets in 1 of 1 sources")
	require.Equal(t, 503, send(), "the running cloud cannot open the re-sealed secret: quarantined")
	require.Empty(t, c.deliveries(hostID, ""))

	hup()
	eventually(t, 30*time.Second, "the quarantined webhook released", func() bool {
		return len(c.deliveries(hostID, "")) == 1
	})
	require.Equal(t, 1, reloads())
	require.Equal(t, 200, send(), "admitted, not quarantined")

	// The old key dropped.
	writeKeys(k2)
	hup()
	eventually(t, 30*time.Second, "second reload", func() bool { return reloads() == 2 })
	require.Equal(t, 200, send())
	require.NotContains(t, tail(c.logPath, 100000), "decrypts the stored secrets", "the canary opens with the new key")

	// A file that does not parse: the running keys stay.
	require.NoError(t, os.WriteFile(keysFile, []byte("not a key\n"), 0o600))
	hup()
	eventually(t, 30*time.Second, "the failed reload logged", func() bool {
		return strings.Contains(tail(c.logPath, 100000), "secret keys not reloaded")
	})
	require.Equal(t, 2, reloads())
	require.Equal(t, 200, send())
	require.Len(t, c.deliveries(hostID, ""), 4)
}
