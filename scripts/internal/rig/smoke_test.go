package rig

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSmoke runs the whole rig once: build, a cloud on SQLite (and on a
// throwaway Postgres with RIG_SMOKE=postgres), a host forwarding to a
// receiver, one signed webhook end to end, then one to a group of that
// host. It builds the binaries, so it
// runs only when RIG_SMOKE is set.
func TestSmoke(t *testing.T) {
	mode := os.Getenv("RIG_SMOKE")
	if mode == "" {
		t.Skip("set RIG_SMOKE=1 (or postgres) to run")
	}
	ctx := context.Background()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bins, err := Build(ctx, root, filepath.Join(tmp, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	dbURL := "sqlite:" + filepath.Join(tmp, "cloud.db")
	if mode == "postgres" {
		pg, err := StartPostgres(ctx, root, "", true)
		if err != nil {
			t.Fatal(err)
		}
		defer pg.Stop()
		if dbURL, err = pg.NewDatabase(ctx, "smoke"); err != nil {
			t.Fatal(err)
		}
	}
	c, err := StartCloud(ctx, CloudConfig{Bin: bins.Cloud, DatabaseURL: dbURL, DataDir: filepath.Join(tmp, "cloud")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.CreateHost(ctx, "smoke")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutGitHubSource(ctx, h.ID, "secret"); err != nil {
		t.Fatal(err)
	}
	rc, err := StartReceiver(ReceiverOptions{HashBodies: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	host, err := StartHost(ctx, HostConfig{Bin: bins.Host, CloudURL: c.URL, ClaimCode: h.ClaimCode,
		StateDir: filepath.Join(tmp, "host"), Config: ForwardConfig(rc.URL, true, 8)})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	event, body := GitHubPayload()
	w := SignGitHub("secret", event, NewDeliveryID(), body)
	req, _ := w.NewRequest(ctx, c.URL, h.ID, "github")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("intake status %d", resp.StatusCode)
	}
	err = WaitFor(ctx, 20*time.Second, 20*time.Millisecond, "acked", func() (bool, error) {
		counts, err := c.Counts(ctx, h.ID)
		return counts["acked"] == 1 && rc.Unique() == 1, err
	})
	if err != nil {
		t.Fatalf("%v\ncloud:\n%s\nhost:\n%s", err, c.Tail(20), host.Tail(20))
	}
	for _, hit := range rc.Snapshot() {
		if hit.EventID != w.Delivery {
			t.Fatalf("event id %q, want %q", hit.EventID, w.Delivery)
		}
	}
	smokeGroup(ctx, t, c, h.ID, rc)
	if b, err := ReadDBBytes(ctx, dbURL); err != nil || b.Size <= 0 || (mode == "postgres") != (b.WAL >= 0) {
		t.Fatalf("database bytes %+v %v", b, err)
	}
	if mode == "postgres" {
		if r, err := ReadPGReads(ctx, dbURL); err != nil || len(r.Blocks) == 0 || r.Blocks["deliveries"] < 0 || r.BackendWrites < 0 {
			t.Fatalf("read statistics %+v %v", r, err)
		}
	}
	s, err := ReadProc(c.PID())
	if err != nil || s.VmHWM <= 0 {
		t.Fatalf("proc %+v %v", s, err)
	}
	if err := host.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// smokeGroup makes the host the one member of a fanout group, sends the
// group a webhook, waits for it at the receiver, and takes the group down.
func smokeGroup(ctx context.Context, t *testing.T, c *Cloud, hostID string, rc *Receiver) {
	t.Helper()
	g, err := c.NewGroup(ctx, "smoke", hostID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutGroupSource(ctx, g, "github", map[string]any{"mode": "fanout", "provider": "github", "secrets": []string{"group-secret"}}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Group(ctx, g)
	if err != nil || len(info.Members) != 1 || info.Members[0].HostID != hostID {
		t.Fatalf("group %+v %v", info, err)
	}
	event, body := GitHubPayload()
	req, _ := SignGitHub("group-secret", event, NewDeliveryID(), body).NewRequest(ctx, c.URL, g, "github")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("group intake status %d", resp.StatusCode)
	}
	if err := WaitFor(ctx, 20*time.Second, 20*time.Millisecond, "the group's webhook", func() (bool, error) { return rc.Unique() == 2, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RemoveMember(ctx, g, hostID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeactivateGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
}
