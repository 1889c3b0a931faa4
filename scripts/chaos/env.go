package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

const (
	adminToken = "chaos-admin-token-of-at-least-32-characters"
	jwtKey     = "chaos-replicas-share-this-jwt-key-32+bytes"
)

// secretKeys is the key ring every cloud replica of a scenario shares.
var secretKeys = base64.StdEncoding.EncodeToString([]byte("chaos replicas share this key!!!"))

// env is what every scenario shares: the binaries, the throwaway Postgres,
// a work directory and the per-scenario clean-ups.
type env struct {
	short, verbose, keep bool
	seed                 int64
	root                 string // the module's directory
	work                 string // everything the run writes
	bin                  string // cloud and host binaries
	pg                   *pgServer
	abuse                abuseConfig // scenario 7's attackers
	// transport is the hosts' transport in the scenario running
	// (heartbeat, websocket).
	transport string

	mu       sync.Mutex
	rng      *rand.Rand
	cleanups []func()
	scenDir  string
}

func newEnv(ctx context.Context, short, verbose, keep bool, seed int64) (*env, error) {
	root, work, err := rig.WorkDir("relay-chaos-")
	if err != nil {
		return nil, err
	}
	e := &env{short: short, verbose: verbose, keep: keep, seed: seed, root: root, work: work,
		rng: rand.New(rand.NewPCG(uint64(seed), 0x636861))}
	e.logf("work directory %s", work)
	bins, err := rig.Build(ctx, root, filepath.Join(work, "bin"))
	if err != nil {
		e.close()
		return nil, err
	}
	e.bin = bins.Dir
	return e, nil
}

func (e *env) close() {
	if e.pg != nil {
		e.pg.stop()
	}
	if e.keep {
		fmt.Fprintf(os.Stderr, "chaos: kept %s\n", e.work)
		return
	}
	os.RemoveAll(e.work)
}

func (e *env) logf(format string, args ...any) {
	if e.verbose {
		fmt.Fprintf(os.Stderr, "%s chaos: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// randInt is a random int in [0, n) from the run's seeded source.
func (e *env) randInt(n int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.IntN(n)
}

// randDur is a random duration in [lo, hi).
func (e *env) randDur(lo, hi time.Duration) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)))
}

// pick returns the full or the -short value.
func pick[T any](e *env, full, short T) T {
	if e.short {
		return short
	}
	return full
}

// runScenario runs s in its own directory and undoes what it started.
func (e *env) runScenario(ctx context.Context, s scenario) (r result) {
	e.scenDir = filepath.Join(e.work, fmt.Sprintf("s%d-%s-%s", s.num, s.name, e.transport))
	_ = os.MkdirAll(e.scenDir, 0o755)
	e.cleanups = nil
	defer func() {
		if p := recover(); p != nil {
			r.failf("scenario panicked: %v", p)
		}
		for i := len(e.cleanups) - 1; i >= 0; i-- {
			e.cleanups[i]()
		}
		e.cleanups = nil
	}()
	return s.run(ctx, e)
}

// onCleanup runs fn when the current scenario ends.
func (e *env) onCleanup(fn func()) { e.cleanups = append(e.cleanups, fn) }

// dir makes a fresh directory in the scenario's directory.
func (e *env) dir(name string) string {
	d := filepath.Join(e.scenDir, name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

// waitFor polls cond every interval until it holds, ctx ends or timeout
// (rig.WaitFor, for a condition that cannot fail).
func waitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func() bool) error {
	return rig.WaitFor(ctx, timeout, interval, what, func() (bool, error) { return cond(), nil })
}

// proc is a binary run with its output appended to a log file, in a
// process group of its own; it can be killed and started again with the
// same arguments.
type proc struct {
	*rig.Proc
	name string
}

func (e *env) newProc(name, bin string, envv []string, args ...string) *proc {
	p := &proc{name: name, Proc: &rig.Proc{Bin: filepath.Join(e.bin, bin), Args: args, Env: envv,
		LogPath: filepath.Join(e.scenDir, name+".log"), LogPerm: 0o644, OwnGroup: true}}
	e.onCleanup(p.Kill)
	return p
}

// stop sends SIGTERM and waits until the process is gone; after within,
// it is SIGKILLed and stop says so.
func (p *proc) stop(within time.Duration) error {
	done := p.Done()
	if p.Signal(syscall.SIGTERM) != nil {
		return nil // not running
	}
	select {
	case <-done:
		return nil
	case <-time.After(within):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.name, within)
	}
}

// cloudProc is a `cloud serve`.
type cloudProc struct {
	*proc
	addr string
	url  string
}

// startCloud runs `cloud serve` on dbURL; replicas of one scenario share
// their keys so that hosts and secrets work across them.
func (e *env) startCloud(ctx context.Context, name, dbURL string, extraEnv ...string) (*cloudProc, error) {
	addr, err := rig.FreeAddr()
	if err != nil {
		return nil, err
	}
	envv := append([]string{
		"RELAY_LISTEN=" + addr,
		"RELAY_DATABASE_URL=" + dbURL,
		"RELAY_ADMIN_TOKEN=" + adminToken,
		"RELAY_DATA_DIR=" + e.dir(name+"-data"),
		"RELAY_JWT_KEY=" + jwtKey,
		"RELAY_SECRET_KEYS=" + secretKeys,
		"RELAY_LOG_LEVEL=info",
	}, extraEnv...)
	c := &cloudProc{proc: e.newProc(name, "cloud", envv, "serve"), addr: addr, url: "http://" + addr}
	if err := c.Start(); err != nil {
		return nil, err
	}
	return c, c.waitReady(ctx)
}

func (c *cloudProc) waitReady(ctx context.Context) error {
	err := waitFor(ctx, 30*time.Second, 20*time.Millisecond, c.name+" ready", func() bool {
		if !c.Running() {
			return true
		}
		resp, err := quickClient.Get(c.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if err == nil && !c.Running() {
		err = fmt.Errorf("%s exited: %v\n%s", c.name, c.ExitErr(), c.Tail(20))
	}
	return err
}

// restart starts a killed cloud again on the same address.
func (c *cloudProc) restart(ctx context.Context) error {
	c.Kill()
	if err := c.Start(); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

var quickClient = &http.Client{Timeout: 5 * time.Second}

// admin calls the admin API of the cloud at base and decodes the answer into
// out; a status other than want is an error.
func admin(ctx context.Context, base, method, path string, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// relayHost is a host known to the cloud, with its github secret, its
// receiver and (once started) its `host run`.
type relayHost struct {
	idx    int
	name   string
	id     string
	code   string
	secret string
	state  string
	listen string
	rc     *receiver
	run    *proc
	kills  []time.Time // when the scenario SIGKILLed it
}

// createHost creates a host on the cloud at base with a github source whose
// retries come quickly and do not run out during a scenario, and lifts its
// rate limit.
func (e *env) createHost(ctx context.Context, base string, idx int) (*relayHost, error) {
	h := &relayHost{idx: idx, name: fmt.Sprintf("chaos-%d", idx), secret: fmt.Sprintf("chaos-github-secret-%d-%d", idx, e.seed)}
	var created struct {
		ID        string `json:"id"`
		ClaimCode string `json:"claim_code"`
	}
	if err := admin(ctx, base, "POST", "/api/hosts", map[string]string{"name": h.name}, &created, 201); err != nil {
		return nil, err
	}
	h.id, h.code = created.ID, created.ClaimCode
	if err := admin(ctx, base, "PUT", "/api/hosts/"+h.id+"/sources/github", map[string]any{
		"secrets":          []string{h.secret},
		"retry_schedule_s": []int{0, 1, 1, 2, 2, 3},
		"max_attempts":     50,
		"options":          replayGuardOff,
	}, nil, 201); err != nil {
		return nil, err
	}
	if err := admin(ctx, base, "PATCH", "/api/hosts/"+h.id,
		map[string]any{"rate_limit_per_min": 1_000_000, "rate_limit_burst": 1_000_000}, nil, 200); err != nil {
		return nil, err
	}
	return h, nil
}

// replayGuardOff are the chaos sources' options: the suite sends the same
// body under many delivery ids, which a GitHub source's replay guard would
// hold as replays.
var replayGuardOff = map[string]string{"replay_guard": "off"}

// hostConfig is the configuration of a chaos host: a forward to its own
// receiver, on transport, heartbeats (when it heartbeats) every second,
// short backoff.
func hostConfig(cloudURL, forward, transport string) map[string]any {
	return map[string]any{
		"cloud_url":            cloudURL,
		"transport":            transport,
		"heartbeat_interval_s": 1,
		"workers":              8,
		"max_backoff_s":        2,
		"shutdown_grace_s":     2,
		"webhooks": map[string]any{
			"github": map[string]any{"enabled": true, "parallel": true, "forward": forward},
		},
	}
}

// startHost claims h (through cloudURL) into stateDir and runs it. The
// receiver must be set.
func (e *env) startHost(ctx context.Context, h *relayHost, cloudURL, stateDir string) error {
	h.state = stateDir
	out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "host"), "claim", "--cloud", cloudURL, "--code", h.code, "--state", stateDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("host claim: %v: %s", err, out)
	}
	b, _ := json.Marshal(hostConfig(cloudURL, h.rc.url, e.transport))
	cfgPath := filepath.Join(stateDir, "config.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return err
	}
	if h.listen, err = rig.FreeAddr(); err != nil {
		return err
	}
	h.run = e.newProc(h.name, "host", []string{"RELAY_HOST_STATE=" + stateDir, "RELAY_HOST_LISTEN=" + h.listen, "RELAY_LOG_LEVEL=info"},
		"run", "--config", cfgPath)
	if err := h.run.Start(); err != nil {
		return err
	}
	return h.waitUp(ctx)
}

// waitUp waits for the host's local API.
func (h *relayHost) waitUp(ctx context.Context) error {
	return waitFor(ctx, 30*time.Second, 20*time.Millisecond, h.name+" local API", func() bool {
		if !h.run.Running() {
			return true
		}
		resp, err := quickClient.Get("http://" + h.listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
}

// killAndRestart SIGKILLs the host and starts it again at once.
func (h *relayHost) killAndRestart() error {
	h.run.Kill()
	h.kills = append(h.kills, time.Now())
	return h.run.Start()
}

// stopAndRestart stops the host as a deploy does (SIGTERM: it finishes
// what runs within its grace, hands back what has not started, reports)
// and starts it again.
func (h *relayHost) stopAndRestart() error {
	if err := h.run.stop(30 * time.Second); err != nil {
		return err
	}
	return h.run.Start()
}

// hostCounts is every host's deliveries by status.
func hostCounts(ctx context.Context, base string) (map[string]map[string]int, error) {
	var list struct {
		Hosts []struct {
			ID     string         `json:"id"`
			Counts map[string]int `json:"counts"`
		} `json:"hosts"`
	}
	if err := admin(ctx, base, "GET", "/api/hosts", nil, &list, 200); err != nil {
		return nil, err
	}
	out := map[string]map[string]int{}
	for _, h := range list.Hosts {
		out[h.ID] = h.Counts
	}
	return out, nil
}

// waitSettled waits until none of the hosts' deliveries is queued,
// delivering, delivered or retrying (every one acked or dead-lettered),
// asking the clouds at bases in turn (some may be down).
func waitSettled(ctx context.Context, bases []string, hosts []*relayHost, timeout time.Duration) (map[string]map[string]int, error) {
	var last map[string]map[string]int
	var lastErr error
	i := 0
	err := waitFor(ctx, timeout, 250*time.Millisecond, "every delivery acked or dead-lettered", func() bool {
		base := bases[i%len(bases)]
		i++
		counts, err := hostCounts(ctx, base)
		if err != nil {
			lastErr = err
			return false
		}
		last = counts
		for _, h := range hosts {
			c := counts[h.id]
			if c["queued"]+c["delivering"]+c["delivered"]+c["retrying"] > 0 {
				return false
			}
		}
		return true
	})
	if err != nil && last == nil && lastErr != nil {
		err = fmt.Errorf("%w (last error: %v)", err, lastErr)
	}
	return last, err
}
