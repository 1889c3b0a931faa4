package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSQLiteBackupOnline: `cloud backup FILE` copies the SQLite database
// while cloud serve runs and takes webhooks; a cloud started on the copy,
// with the same keys, has the hosts, sources and deliveries of the moment
// of the copy. The copy is 0600, an existing file is never overwritten, and
// a Postgres URL is told to use pg_dump.
func TestSQLiteBackupOnline(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	db := "sqlite:" + filepath.Join(dataDir, "cloud.db")
	c := startCloud(t, db, "RELAY_DATA_DIR="+dataDir)
	hostID, _ := c.newHost("backup", secret)
	id := sendGitHub(t, c.url, hostID, "push", "backup-1", []byte(`{"ref":"refs/heads/main"}`))

	backup := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(binDir, "cloud"), append([]string{"backup"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	copyPath := filepath.Join(dir, "copy.db")
	out, err := backup([]string{"RELAY_DATABASE_URL=" + db}, copyPath)
	require.NoError(t, err, out)
	require.Contains(t, out, "backed up")
	fi, err := os.Stat(copyPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	// Taken after the copy: not in it.
	sendGitHub(t, c.url, hostID, "push", "backup-2", []byte(`{"ref":"refs/heads/main"}`))

	out, err = backup([]string{"RELAY_DATABASE_URL=" + db}, copyPath)
	require.Error(t, err)
	require.Equal(t, 2, err.(*exec.ExitError).ExitCode(), out)
	require.Contains(t, out, "exists")
	out, err = backup([]string{"RELAY_DATABASE_URL=postgres://relay@127.0.0.1:1/relay"}, filepath.Join(dir, "pg.db"))
	require.Error(t, err)
	require.Contains(t, out, "pg_dump")

	// Restore: a cloud on the copy, with the same data dir's keys.
	restoredDir := filepath.Join(dir, "restored")
	require.NoError(t, os.MkdirAll(restoredDir, 0o700))
	require.NoError(t, os.Rename(copyPath, filepath.Join(restoredDir, "cloud.db")))
	r := startCloud(t, "sqlite:"+filepath.Join(restoredDir, "cloud.db"), "RELAY_DATA_DIR="+dataDir)
	var ids []string
	for _, d := range r.deliveries(hostID, "") {
		ids = append(ids, d.DeliveryID)
	}
	require.Equal(t, []string{id}, ids)
	// The source's secret opens with the same keys: a webhook is verified and taken.
	id3 := sendGitHub(t, r.url, hostID, "push", "backup-3", []byte(`{"ref":"refs/heads/main"}`))
	require.True(t, strings.HasPrefix(id3, "github:backup-3:"))
}
