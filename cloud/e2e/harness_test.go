package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/cloud/store/postgres/pgtest"
	"github.com/relaykit/relay/shared"
)

// binDir holds the binaries built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relay-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	root, _ := filepath.Abs("../..")
	// The binaries as they ship: built as a release builds them.
	cmd := exec.Command(filepath.Join(root, "scripts", "release.sh"), "--flat", "--out", dir)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build cloud and host: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const adminToken = "e2e-admin-token-of-at-least-32-characters"

// engines are the stores every end-to-end scenario runs on.
func engines(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "cloud.db") },
		"postgres": func(t *testing.T) string { return pgtest.NewDatabase(t) },
	}
}

// eachEngine runs test once per engine, each a subtest on a new database of
// that engine.
func eachEngine(t *testing.T, test func(t *testing.T, dbURL string)) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) { test(t, newDB(t)) })
	}
}

// eachEngineParallel is eachEngine with the subtests in parallel.
func eachEngineParallel(t *testing.T, test func(t *testing.T, dbURL string)) {
	for name, newDB := range engines(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newDB(t))
		})
	}
}

// deadAddr is an address nobody listens on: loopback's port 1 (tcpmux,
// which nothing runs). A port found free and let go of (freeAddr) could
// be bound by another test meanwhile and answer.
const deadAddr = "127.0.0.1:1"

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// serveLocal serves h on a new loopback port until the test ends and
// returns its base URL, http://127.0.0.1:PORT.
func serveLocal(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// runExit runs cmd to completion and returns its exit code and its output
// (stdout and stderr); the test fails only if cmd could not run at all.
func runExit(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err, string(out))
	return 0, string(out)
}

// proc is a running binary whose output goes to a log file.
type proc struct {
	t       *testing.T
	name    string
	args    []string
	env     []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, env: env, logPath: filepath.Join(t.TempDir(), name+".log")}
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s log (tail) ---\n%s", name, tail(p.logPath, 60))
		}
	})
	return p
}

func (p *proc) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(p.t, err)
	cmd := exec.Command(filepath.Join(binDir, p.name), p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(p.t, cmd.Start())
	p.cmd, p.done, p.exitErr = cmd, make(chan struct{}), nil
	go func() {
		p.exitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
}

// listening waits until p logs msg with the address it listens on (its
// addr attribute) and returns that address. The binaries are started on
// port 0 and say where they listen: a port found free and let go of
// beforehand can be taken by another test in between, whose server then
// answers this one's requests (a receiver's 200 looked like a cloud's
// /readyz).
func (p *proc) listening(msg string) string {
	p.t.Helper()
	re := regexp.MustCompile(`msg="` + regexp.QuoteMeta(msg) + `" addr=(\S+)`)
	var addr string
	eventually(p.t, 30*time.Second, p.name+" listening", func() bool {
		p.mustBeRunning()
		b, _ := os.ReadFile(p.logPath)
		if m := re.FindSubmatch(b); m != nil {
			addr = string(m[1])
			return true
		}
		return false
	})
	return addr
}

// mustBeRunning fails the test, with the tail of p's log, if p has exited.
func (p *proc) mustBeRunning() {
	p.t.Helper()
	select {
	case <-p.done:
		p.t.Fatalf("%s exited: %v\n%s", p.name, p.exitErr, tail(p.logPath, 40))
	default:
	}
}

// waitOK waits (up to 30 s) until a GET of url answers 200, failing the
// test if p exits meanwhile.
func (p *proc) waitOK(what, url string) {
	p.t.Helper()
	eventually(p.t, 30*time.Second, what, func() bool {
		p.mustBeRunning()
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	if p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cloud is a running `cloud serve`.
type cloud struct {
	*proc
	url string
}

func startCloud(t *testing.T, dbURL string, extraEnv ...string) *cloud {
	t.Helper()
	env := append([]string{
		"RELAY_LISTEN=127.0.0.1:0",
		"RELAY_DATABASE_URL=" + dbURL,
		"RELAY_ADMIN_TOKEN=" + adminToken,
		"RELAY_DATA_DIR=" + t.TempDir(),
		"RELAY_LOG_LEVEL=debug",
	}, extraEnv...)
	c := &cloud{proc: startProc(t, "cloud", env, "serve")}
	addr := c.listening("cloud listening")
	c.url = "http://" + addr
	c.env = append(c.env, "RELAY_LISTEN="+addr) // a restart comes back there
	c.waitReady()
	return c
}

func (c *cloud) restart() {
	c.t.Helper()
	c.kill()
	c.start()
	c.waitReady()
}

func (c *cloud) waitReady() {
	c.t.Helper()
	c.waitOK("cloud ready", c.url+"/readyz")
}

// admin calls the admin API and decodes the JSON answer into out.
func (c *cloud) admin(method, path string, in, out any) int {
	c.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.url+path, body)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		require.NoError(c.t, json.Unmarshal(b, out), string(b))
	}
	return resp.StatusCode
}

// newHost creates a host with a github source and returns its id and claim
// code. Tests send the same payloads under many delivery ids: the source's
// replay guard is off (TestReplayGuardEndToEnd and TestOpenAPIResponses
// turn it on).
func (c *cloud) newHost(name, secret string) (string, string) {
	c.t.Helper()
	var h shared.CreateHostResponse
	require.Equal(c.t, 201, c.admin("POST", "/api/hosts", map[string]string{"name": name}, &h))
	require.Equal(c.t, 201, c.admin("PUT", "/api/hosts/"+h.ID+"/sources/github", map[string]any{"secrets": []string{secret},
		"options": guardOff}, nil))
	return h.ID, h.ClaimCode
}

// guardOff are the options of the tests' GitHub sources: the tests send
// one payload under many delivery ids, which the replay guard would hold.
// A PUT replaces a source's options, so every PUT of one passes them.
var guardOff = map[string]string{"replay_guard": "off"}

type deliveryView struct {
	DeliveryID string `json:"delivery_id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
}

// deliveries lists every delivery of a host, following cursors.
func (c *cloud) deliveries(hostID, status string) []deliveryView {
	c.t.Helper()
	var all []deliveryView
	cursor := ""
	for {
		var page struct {
			Webhooks   []deliveryView `json:"webhooks"`
			NextCursor string         `json:"next_cursor"`
		}
		q := "?limit=500"
		if status != "" {
			q += "&status=" + status
		}
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		require.Equal(c.t, 200, c.admin("GET", "/api/hosts/"+hostID+"/webhooks"+q, nil, &page))
		all = append(all, page.Webhooks...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// host is a running `host run`.
type host struct {
	*proc
	state  string
	listen string
}

// forwardTo is a host config: the settings (nil for none) and a forward
// handler to url for the github source.
func forwardTo(url string, settings map[string]any) map[string]any {
	return githubHandler("forward", url, settings)
}

// execTo is a host config: the settings (nil for none) and an exec handler
// running argv for the github source.
func execTo(argv []string, settings map[string]any) map[string]any {
	return githubHandler("exec", argv, settings)
}

func githubHandler(kind string, handler any, settings map[string]any) map[string]any {
	cfg := map[string]any{"webhooks": map[string]any{"github": map[string]any{"enabled": true, kind: handler}}}
	for k, v := range settings {
		cfg[k] = v
	}
	return cfg
}

// claimAndStartHost claims a host into a fresh state dir and runs it with a
// forward handler for the github source (and any extra sources named).
func claimAndStartHost(t *testing.T, cloudURL, code, forwardURL string, extraSources ...string) *host {
	t.Helper()
	sources := map[string]any{"github": map[string]any{"enabled": true, "forward": forwardURL}}
	for _, s := range extraSources {
		sources[s] = map[string]any{"enabled": true, "forward": forwardURL}
	}
	return startHost(t, cloudURL, code, map[string]any{"webhooks": sources})
}

// claimHost claims the host with code, through the cloud at cloudURL, into a
// fresh state directory and returns it.
func claimHost(t *testing.T, cloudURL, code string) string {
	t.Helper()
	state := t.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "host"), "claim", "--cloud", cloudURL, "--code", code, "--state", state).CombinedOutput()
	require.NoError(t, err, string(out))
	return state
}

// startHost claims a host with code into a fresh state directory and runs it
// with cfg (cloud_url and heartbeat_interval_s 1 are added unless set),
// reaching the cloud at cloudURL, with env added to its environment. It
// returns once the host's local API answers.
func startHost(t *testing.T, cloudURL, code string, cfg map[string]any, env ...string) *host {
	t.Helper()
	state := claimHost(t, cloudURL, code)
	if _, ok := cfg["cloud_url"]; !ok {
		cfg["cloud_url"] = cloudURL
	}
	if _, ok := cfg["heartbeat_interval_s"]; !ok {
		cfg["heartbeat_interval_s"] = 1
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	cfgPath := filepath.Join(state, "config.json")
	require.NoError(t, os.WriteFile(cfgPath, b, 0o600))
	h := &host{state: state}
	h.proc = startProc(t, "host", append([]string{"RELAY_HOST_STATE=" + state, "RELAY_HOST_LISTEN=127.0.0.1:0"}, env...), "run", "--config", cfgPath)
	listen := h.listening("local API listening")
	h.listen = listen
	h.env = append(h.env, "RELAY_HOST_LISTEN="+listen) // a restart comes back there
	h.waitOK("host local API up", "http://"+listen+"/healthz")
	return h
}

func (h *host) restart() {
	h.t.Helper()
	h.kill()
	h.start()
}

// ledgerResult is the host ledger's result for a delivery ("" if none).
func (h *host) ledgerResult(id string) string {
	resp, err := http.Get("http://" + h.listen + "/webhooks/ledger/" + id)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var e struct {
		Result string `json:"result"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return e.Result
}

// received is one request seen by the receiver.
type received struct {
	Header http.Header
	Body   []byte
}

// receiver is the local app behind the host: it records every request.
type receiver struct {
	mu     sync.Mutex
	byKey  map[string][]received
	url    string
	before func(r *http.Request) // runs before answering, if set
}

func startReceiver(t *testing.T) *receiver {
	rc := &receiver{byKey: map[string][]received{}}
	rc.url = serveLocal(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		rc.byKey[key] = append(rc.byKey[key], received{Header: r.Header.Clone(), Body: b})
		before := rc.before
		rc.mu.Unlock()
		if before != nil {
			before(r)
		}
		w.WriteHeader(200)
	})) + "/hook"
	return rc
}

func (rc *receiver) snapshot() map[string][]received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[string][]received, len(rc.byKey))
	for k, v := range rc.byKey {
		out[k] = append([]received(nil), v...)
	}
	return out
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, v := range rc.byKey {
		n += len(v)
	}
	return n
}

// githubWebhook is a signed GitHub delivery as GitHub would send it.
type githubWebhook struct {
	event    string
	delivery string
	body     []byte
	headers  map[string]string
}

func signGitHub(secret, event, delivery string, body []byte) githubWebhook {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return githubWebhook{event: event, delivery: delivery, body: body, headers: map[string]string{
		"Content-Type":                           "application/json",
		"User-Agent":                             "GitHub-Hookshot/a1b2c3d",
		"X-GitHub-Event":                         event,
		"X-GitHub-Delivery":                      delivery,
		"X-GitHub-Hook-ID":                       "292430182",
		"X-GitHub-Hook-Installation-Target-Type": "repository",
		"X-GitHub-Hook-Installation-Target-ID":   "79929171",
		"X-Hub-Signature-256":                    "sha256=" + hex.EncodeToString(m.Sum(nil)),
	}}
}

// send posts a webhook and returns the status and decoded answer.
func (w githubWebhook) send(cloudURL, hostID string) (int, shared.IntakeResponse, error) {
	req, _ := http.NewRequest("POST", cloudURL+"/api/webhooks/"+hostID+"/github", bytes.NewReader(w.body))
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, shared.IntakeResponse{}, err
	}
	defer resp.Body.Close()
	var out shared.IntakeResponse
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// githubPayloads loads the real GitHub payloads in testdata, keyed by event.
func githubPayloads(t *testing.T) []githubWebhook {
	t.Helper()
	files, err := filepath.Glob("testdata/github/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var out []githubWebhook
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		event := strings.SplitN(filepath.Base(f), ".", 2)[0]
		out = append(out, githubWebhook{event: event, body: b})
	}
	return out
}

// eventually polls cond every 20 ms until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// toggleProxy forwards TCP to a target until blocked; blocking closes the
// listener and every open connection, as a network cut would.
type toggleProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *toggleProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &toggleProxy{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}, ln: ln}
	go p.accept(ln)
	t.Cleanup(p.block)
	return p
}

func (p *toggleProxy) url() string { return "http://" + p.addr }

func (p *toggleProxy) unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the port may linger briefly after a block
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(p.t, err)
	p.ln = ln
	go p.accept(ln)
}

func (p *toggleProxy) block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *toggleProxy) accept(ln net.Listener) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln { // blocked meanwhile
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go func() { io.Copy(out, in); out.Close() }()
		go func() { io.Copy(in, out); in.Close() }()
	}
}
