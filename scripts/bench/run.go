package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// bench holds what every scenario shares.
type bench struct {
	ctx     context.Context
	cfg     *config
	root    string
	work    string
	bins    *rig.Bins
	source  string // what the binaries were built from, as the report says it
	pg      *rig.Postgres
	mix     *payloadMix
	ids     *ids
	started time.Time
	failed  bool
	n       int
}

const secret = "bench-webhook-secret"

// cloudEnv lifts the per-host intake rate limit, which would otherwise
// measure the limiter (GitHub webhooks over it are stored anyway, but
// flagged and counted apart), to the most the cloud accepts: 1,000,000 a
// minute (16,667/s) is above any rate measured here. The bench's hosts all
// connect, claim and log in from 127.0.0.1: no limit of connections per
// address, and the authentication limiter (whose burst counts attempts in
// progress) out of the way of 16 claims at once.
var cloudEnv = []string{"RELAY_RATE_LIMIT_PER_MIN=1000000", "RELAY_MAX_CONNS_PER_IP=0", "RELAY_AUTH_FAILURES_PER_MIN=100000"}

// run is one scenario's cloud on a fresh database, with a host created.
type run struct {
	b       *bench
	engine  string
	dir     string
	dbURL   string
	cloud   *rig.Cloud
	hostID  string
	code    string
	host    *rig.Host
	recv    *rig.Receiver
	senders []*sender
	// A group run's group and its members (groups.go); hostID is then
	// a host outside the group that takes no webhooks.
	groupID string
	members []*member
}

// newRun starts a cloud on a new database of engine and creates a host with
// a github source, and a stripe source when the mix sends to one; env is
// added to the cloud's environment.
func (b *bench) newRun(engine, name string, env ...string) (*run, error) {
	r, err := b.newCloud(engine, name, env...)
	if err != nil {
		return nil, err
	}
	if err := r.addHost("bench"); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// addHost creates a host named name with the mix's sources (createHost)
// and makes it the run's host: the one its senders send to and its host
// process claims.
func (r *run) addHost(name string) error {
	id, code, err := r.b.createHost(r.b.ctx, r.cloud.Admin, name)
	if err != nil {
		return err
	}
	r.hostID, r.code = id, code
	return nil
}

// createHost creates a host named name through the admin API with a
// github source, and a stripe source when the mix sends to one, and
// returns its id and claim code.
func (b *bench) createHost(ctx context.Context, admin *rig.Admin, name string) (id, code string, err error) {
	h, err := admin.CreateHost(ctx, name)
	if err == nil {
		err = admin.PutGitHubSource(ctx, h.ID, secret)
	}
	if err == nil && slices.Contains(b.mix.providers(), "stripe") {
		err = admin.PutSource(ctx, h.ID, "stripe", map[string]any{"provider": "stripe", "secrets": []string{stripeSecret}})
	}
	if err != nil {
		return "", "", fmt.Errorf("create host %s: %w", name, err)
	}
	return h.ID, h.ClaimCode, nil
}

// newCloud starts a cloud on a new database of engine, with no host; env
// is added to the cloud's environment.
func (b *bench) newCloud(engine, name string, env ...string) (*run, error) {
	b.n++
	r := &run{b: b, engine: engine, dir: filepath.Join(b.work, fmt.Sprintf("%02d-%s-%s", b.n, engine, name))}
	switch engine {
	case "sqlite":
		r.dbURL = "sqlite:" + filepath.Join(r.dir, "cloud.db")
	case "postgres":
		u, err := b.pg.NewDatabase(b.ctx, name)
		if err != nil {
			return nil, err
		}
		r.dbURL = u
	}
	c, err := rig.StartCloud(b.ctx, rig.CloudConfig{Bin: b.bins.Cloud, DatabaseURL: r.dbURL, DataDir: filepath.Join(r.dir, "cloud"), Env: append(slices.Clone(cloudEnv), env...)})
	if err != nil {
		r.close()
		return nil, err
	}
	r.cloud = c
	return r, nil
}

func (r *run) sender(conns int) *sender {
	s := newSender(r.cloud.URL, r.hostID, conns, r.b.mix, r.b.ids, r.b.cfg.dup)
	r.senders = append(r.senders, s)
	return s
}

// hostConfig is rig.ForwardConfig with a source for each provider of the
// mix, each forwarding to url alike.
func (b *bench) hostConfig(url string, parallel bool, workers int) map[string]any {
	cfg := rig.ForwardConfig(url, parallel, workers)
	hooks := cfg["webhooks"].(map[string]any)
	for _, p := range b.mix.providers() {
		hooks[p] = hooks["github"]
	}
	return cfg
}

// startHost claims the run's host and runs it forwarding to a new receiver;
// env is added to the host's environment.
func (r *run) startHost(parallel bool, workers int, transport string, env ...string) error {
	rc, err := rig.StartReceiver(rig.ReceiverOptions{})
	if err != nil {
		return err
	}
	r.recv = rc
	h, err := rig.StartHost(r.b.ctx, rig.HostConfig{Bin: r.b.bins.Host, CloudURL: r.cloud.URL, ClaimCode: r.code,
		StateDir: r.hostDir(), Config: withTransport(r.b.hostConfig(rc.URL, parallel, workers), transport), Env: env})
	if err != nil {
		return err
	}
	r.host = h
	return nil
}

// hostDir is the state directory of the run's host process.
func (r *run) hostDir() string { return filepath.Join(r.dir, "host-"+r.hostID) }

// withTransport sets a host configuration's transport.
func withTransport(cfg map[string]any, transport string) map[string]any {
	cfg["transport"] = transport
	return cfg
}

// peak is a process's peak RSS so far (0 when it does not run).
func peak(p *rig.Proc) int64 {
	if p == nil || !p.Running() {
		return 0
	}
	s, err := rig.ReadProc(p.PID())
	if err != nil {
		return 0
	}
	return s.VmHWM
}

func (r *run) cloudPeak() int64 {
	if r.cloud == nil {
		return 0
	}
	return peak(r.cloud.Proc)
}

func (r *run) hostPeak() int64 {
	if r.host == nil {
		return 0
	}
	return peak(r.host.Proc)
}

// fail records a scenario's error, with the logs' tails, and keeps the work
// directory.
func (r *run) fail(err error) string {
	r.b.failed = true
	logf("%s: %v", r.engine, err)
	if r.cloud != nil {
		logf("cloud log (%s):\n%s", r.cloud.LogPath, r.cloud.Tail(15))
	}
	if r.host != nil {
		logf("host log (%s):\n%s", r.host.LogPath, r.host.Tail(15))
	}
	for _, m := range r.members {
		if m.host != nil {
			logf("member %s log (%s):\n%s", m.id, m.host.LogPath, m.host.Tail(10))
		}
	}
	return err.Error()
}

// close stops everything the run started and drops its database.
func (r *run) close() {
	for _, s := range r.senders {
		s.close()
	}
	if r.host != nil {
		_ = r.host.Close()
	}
	r.closeMembers()
	if r.recv != nil {
		_ = r.recv.Close()
	}
	if r.cloud != nil {
		_ = r.cloud.Close()
	}
	if r.engine == "postgres" && r.dbURL != "" && !r.b.cfg.keep {
		if err := r.b.pg.DropDatabase(context.Background(), r.dbURL); err != nil {
			logf("drop database: %v", err)
		}
	}
	// A SQLite file goes too, unless kept: the scale runs' are gigabytes.
	if path, ok := strings.CutPrefix(r.dbURL, "sqlite:"); ok && !r.b.cfg.keep && !r.b.failed {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
	}
}
