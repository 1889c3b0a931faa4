package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
