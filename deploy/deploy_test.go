package deploy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/relaykit/relay/cloud/tlsconf/tlstest"
)

const (
	testVersion = "1.2.3-test"
	testCommit  = "0123456789abcdef0123456789abcdef01234567"
)

// release is the output of scripts/release.sh for this machine's platform,
// built once by TestMain, and root the repository.
var release, root string

func TestMain(m *testing.M) {
	var err error
	root, err = filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "relay-release")
	if err != nil {
		panic(err)
	}
	release = dir
	cmd := exec.Command("scripts/release.sh", "--out", dir)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "COMMIT="+testCommit,
		"RELEASE_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "scripts/release.sh:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// bin is a release binary of this platform.
func bin(name string) string {
	return filepath.Join(release, name+"_"+testVersion+"_"+runtime.GOOS+"_"+runtime.GOARCH)
}

func runBin(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin(name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestReleaseBinaries: make release's binaries carry the version and
// commit, their checksums verify, they are static, and they run.
func TestReleaseBinaries(t *testing.T) {
	sums, err := os.ReadFile(filepath.Join(release, "SHA256SUMS"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	require.Len(t, lines, 2, string(sums))
	for _, l := range lines {
		sum, name, ok := strings.Cut(l, "  ")
		require.True(t, ok, l)
		b, err := os.ReadFile(filepath.Join(release, name))
		require.NoError(t, err)
		got := sha256.Sum256(b)
		require.Equal(t, sum, hex.EncodeToString(got[:]), name)
	}

	for _, name := range []string{"cloud", "host"} {
		out, err := runBin(t, nil, name, "version")
		require.NoError(t, err, out)
		require.Contains(t, out, name+" "+testVersion+" (commit "+testCommit)

		if runtime.GOOS == "linux" {
			f, err := elf.Open(bin(name))
			require.NoError(t, err)
			for _, p := range f.Progs {
				require.NotEqual(t, elf.PT_INTERP, p.Type, "%s is static: no dynamic loader", name)
			}
			libs, _ := f.ImportedLibraries()
			require.Empty(t, libs, name)
			f.Close()
		}
	}
	out, err := runBin(t, nil, "cloud", "serve", "-h")
	require.NoError(t, err, out)
	require.Contains(t, out, "RELAY_TLS_CERT")
	require.Contains(t, out, "RELAY_DATABASE_URL")
	out, err = runBin(t, nil, "host", "run", "-h")
	require.NoError(t, err, out)
}

// TestCloudHealth: `cloud health`, the image's health check, says 0 while
// the cloud of the same settings is ready and 1 once it is gone.
func TestCloudHealth(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	env := []string{"RELAY_LISTEN=" + addr, "RELAY_DATABASE_URL=sqlite:" + filepath.Join(dir, "cloud.db"), "RELAY_DATA_DIR=" + dir}
	out, err := runBin(t, env, "cloud", "health")
	require.Error(t, err, "nothing listens yet: %s", out)

	cmd, log, done := startServe(t, env)
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err = runBin(t, env, "cloud", "health")
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "cloud never healthy: %s\n%s", out, log.String())
		time.Sleep(100 * time.Millisecond) // polling a real process's start-up
	}
	require.Equal(t, "ok\n", out)
	require.NoError(t, cmd.Process.Kill())
	<-done
	_, err = runBin(t, env, "cloud", "health")
	require.Error(t, err)
}

// dockerfile is deploy/Dockerfile's instructions, continuation lines
// joined, comments dropped.
func dockerfile(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// TestDockerfileBuildsAsRelease: the Dockerfile builds its binaries the
// way make release does — with scripts/release.sh, which builds static
// (CGO_ENABLED=0) — and nothing else builds Go in it; each image runs as a
// non-root user and has a health check. This holds whether or
// not docker can build here (TestDockerBuild).
func TestDockerfileBuildsAsRelease(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^release:.*\n\tscripts/release\.sh\s*$`, string(mk), "make release runs scripts/release.sh")
	script, err := os.ReadFile(filepath.Join(root, "scripts", "release.sh"))
	require.NoError(t, err)
	// Comment lines are not builds.
	builds := regexp.MustCompile(`(?m)^\s*([^#\s].*\bgo build\b.*)$`).FindAllStringSubmatch(string(script), -1)
	require.Len(t, builds, 1, "release.sh has one go build")
	require.Contains(t, builds[0][1], "CGO_ENABLED=0")
	require.Contains(t, builds[0][1], "-trimpath")

	stage := ""
	stages := map[string]map[string][]string{} // stage → instruction → arguments
	for _, ins := range dockerfile(t) {
		op, args, _ := strings.Cut(ins, " ")
		op = strings.ToUpper(op)
		if op == "FROM" {
			f := strings.Fields(args)
			stage = f[len(f)-1]
			stages[stage] = map[string][]string{}
		}
		if stage != "" {
			stages[stage][op] = append(stages[stage][op], args)
		}
		require.NotContains(t, ins, "go build", "Go is built by scripts/release.sh only: %s", ins)
		require.NotContains(t, ins, "CGO_ENABLED=1", ins)
	}
	require.Contains(t, stages, "build")
	var built bool
	for _, r := range stages["build"]["RUN"] {
		if strings.Contains(r, "scripts/release.sh --out /out --flat") {
			built = true
			require.Contains(t, r, "VERSION=$VERSION")
			require.Contains(t, r, "COMMIT=$COMMIT")
		}
	}
	require.True(t, built, "the build stage runs scripts/release.sh --flat")
	for _, target := range []string{"cloud", "host"} {
		s, ok := stages[target]
		require.True(t, ok, "target %s", target)
		require.Len(t, s["USER"], 1, target)
		uid, _, _ := strings.Cut(s["USER"][0], ":")
		n, err := strconv.Atoi(uid)
		require.NoError(t, err, "%s: a numeric user, so Kubernetes' runAsNonRoot can check it", target)
		require.NotZero(t, n, target)
		require.Contains(t, strings.Join(s["COPY"], "\n"), "--from=build /out/"+target+" ", target)
		require.Contains(t, strings.Join(s["ENTRYPOINT"], ""), "/usr/local/bin/"+target)
	}
	require.Equal(t, []string{`--interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/cloud", "health"]`}, stages["cloud"]["HEALTHCHECK"])
	require.Equal(t, []string{`--interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["/usr/local/bin/host", "health"]`}, stages["host"]["HEALTHCHECK"])

	// The flat build the Dockerfile asks for gives both binaries.
	out := t.TempDir()
	cmd := exec.Command("scripts/release.sh", "--out", out, "--flat")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION="+testVersion, "COMMIT="+testCommit)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	for _, name := range []string{"cloud", "host"} {
		v, err := exec.Command(filepath.Join(out, name), "version").CombinedOutput()
		require.NoError(t, err, string(v))
		require.Contains(t, string(v), testVersion)
	}
}

// dockerEngine skips the test, saying why, unless docker can build here.
func dockerEngine(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed: the images are not built (TestDockerfileBuildsAsRelease checks the Dockerfile)")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("the docker CLI is here but no engine answers (%s): the images are not built (TestDockerfileBuildsAsRelease checks the Dockerfile)",
			strings.TrimSpace(string(out)))
	}
}

// TestDockerBuild builds both images and runs them with a read-only root
// filesystem, where a docker engine runs.
func TestDockerBuild(t *testing.T) {
	dockerEngine(t)
	for _, target := range []string{"cloud", "host"} {
		tag := "relay-" + target + ":test"
		out, err := exec.Command("docker", "build", "-f", "deploy/Dockerfile", "--target", target, "-t", tag,
			"--build-arg", "VERSION="+testVersion, "--build-arg", "COMMIT="+testCommit, root).CombinedOutput()
		require.NoError(t, err, string(out))
		out, err = exec.Command("docker", "run", "--rm", "--read-only", tag, "version").CombinedOutput()
		require.NoError(t, err, string(out))
		require.Contains(t, string(out), target+" "+testVersion)
	}
}

// TestCompose: compose.yaml has Postgres, two cloud replicas sharing their
// keys behind the proxy, whose address is the one the replicas trust, and
// a host; the proxy sends to both replicas without buffering.
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	require.NoError(t, err)
	var c struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			ReadOnly    bool              `yaml:"read_only"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Volumes     []string          `yaml:"volumes"`
			Build       struct {
				Dockerfile string `yaml:"dockerfile"`
				Target     string `yaml:"target"`
			} `yaml:"build"`
			Networks yaml.Node `yaml:"networks"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(b, &c))
	for _, s := range []string{"postgres", "cloud-1", "cloud-2", "proxy", "host"} {
		require.Contains(t, c.Services, s)
	}
	// Postgres checkpoints by time, not every gigabyte of intake's WAL,
	// and compresses the whole pages written after each.
	require.Subset(t, c.Services["postgres"].Command, []string{"max_wal_size=8GB", "checkpoint_timeout=15min", "wal_compression=lz4"})
	c1, c2 := c.Services["cloud-1"], c.Services["cloud-2"]
	require.Equal(t, c1.Environment, c2.Environment, "the replicas share every setting")
	for _, k := range []string{"RELAY_SECRET_KEYS", "RELAY_JWT_KEY", "RELAY_ADMIN_TOKEN"} {
		require.NotEmpty(t, c1.Environment[k], k)
	}
	require.True(t, strings.HasPrefix(c1.Environment["RELAY_DATABASE_URL"], "postgres://"))
	require.True(t, c1.ReadOnly)
	require.True(t, c.Services["host"].ReadOnly)
	require.Equal(t, "cloud", c1.Build.Target)
	require.Equal(t, "host", c.Services["host"].Build.Target)
	require.Equal(t, "deploy/Dockerfile", c1.Build.Dockerfile)
	for name, s := range c.Services {
		if name != "proxy" {
			require.Empty(t, s.Ports, "%s publishes no port: only the proxy does", name)
		}
	}
	require.Contains(t, string(b), "ipv4_address: "+c1.Environment["RELAY_TRUSTED_PROXIES"], "the replicas trust the proxy's address alone")

	var caddyfile string
	for _, v := range c.Services["proxy"].Volumes {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasPrefix(dst, "/etc/caddy/Caddyfile") {
			caddyfile = src
		}
	}
	cf, err := os.ReadFile(caddyfile)
	require.NoError(t, err)
	require.Contains(t, string(cf), "reverse_proxy cloud-1:8080 cloud-2:8080")
	require.Contains(t, string(cf), "flush_interval -1")
	_, err = os.Stat("host.json")
	require.NoError(t, err)

	if out, err := exec.Command("docker", "compose", "version").CombinedOutput(); err != nil {
		t.Logf("docker compose is not installed (%s): compose.yaml was checked by this test alone", strings.TrimSpace(string(out)))
		return
	}
	cmd := exec.Command("docker", "compose", "-f", "compose.yaml", "--env-file", "example.env", "config", "-q")
	cmd.Env = append(os.Environ(), "RELAY_PG_PASSWORD=x", "RELAY_SECRET_KEYS=x", "RELAY_JWT_KEY=x", "RELAY_ADMIN_TOKEN=x")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

// TestProxyConfigs: the nginx and Caddy examples turn buffering off, wait
// long enough for long polls, take 25 MiB bodies and hand the cloud a
// client address the client cannot forge; each is checked by its own
// tool where that tool is installed.
func TestProxyConfigs(t *testing.T) {
	ng, err := os.ReadFile("proxy/nginx.conf")
	require.NoError(t, err)
	n := string(ng)
	for _, want := range []string{"proxy_buffering off;", "proxy_request_buffering off;", "proxy_set_header X-Forwarded-For $remote_addr;",
		"proxy_http_version 1.1;", "client_max_body_size 26m;", "return 308 https://"} {
		require.Contains(t, n, want)
	}
	m := regexp.MustCompile(`proxy_read_timeout (\d+)s;`).FindStringSubmatch(n)
	require.NotNil(t, m)
	secs, _ := strconv.Atoi(m[1])
	require.GreaterOrEqual(t, secs, 60, "longer than a long poll (25 s) with room")
	require.NotContains(t, n, "$proxy_add_x_forwarded_for", "appending would pass on what the client sent")

	cf, err := os.ReadFile("proxy/Caddyfile")
	require.NoError(t, err)
	require.Contains(t, string(cf), "flush_interval -1")
	require.Contains(t, string(cf), "max_size 26MB")

	if _, err := exec.LookPath("nginx"); err == nil {
		dir := t.TempDir()
		conf := filepath.Join(dir, "nginx.conf")
		wrapper := "pid " + filepath.Join(dir, "nginx.pid") + ";\nerror_log stderr;\nevents {}\nhttp {\ninclude " + filepath.Join(root, "deploy/proxy/nginx.conf") + ";\n}\n"
		require.NoError(t, os.WriteFile(conf, []byte(wrapper), 0o600))
		out, err := exec.Command("nginx", "-t", "-c", conf).CombinedOutput()
		// The certificate paths are the example's: only a missing file is allowed.
		if err != nil && !strings.Contains(string(out), "cannot load certificate") {
			t.Fatalf("nginx -t: %s", out)
		}
	} else {
		t.Log("nginx is not installed: nginx.conf was checked by this test alone")
	}
	if _, err := exec.LookPath("caddy"); err == nil {
		for _, f := range []string{"proxy/Caddyfile", "proxy/Caddyfile.compose"} {
			out, err := exec.Command("caddy", "adapt", "--adapter", "caddyfile", "--config", f).CombinedOutput()
			require.NoError(t, err, "%s: %s", f, out)
		}
	} else {
		t.Log("caddy is not installed: the Caddyfiles were checked by this test alone")
	}
}

// unit reads a systemd unit's [Service] settings (a key may repeat).
func unit(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]string{}
	section := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			k, v, _ := strings.Cut(l, "=")
			out[k] = append(out[k], v)
		}
	}
	return out
}

// TestSystemdUnits: each unit runs its binary as a dedicated user with a
// state directory and the sandbox on, reloads with SIGHUP (both binaries
// read their files again on it), does not restart on a bad configuration,
// and passes systemd-analyze verify and, offline, an exposure score of
// "OK" (below 2.0) where systemd-analyze is installed.
func TestSystemdUnits(t *testing.T) {
	for _, c := range []struct{ unit, binary, user, state string }{
		{"systemd/relay-cloud.service", "cloud", "relay-cloud", "relay-cloud"},
		{"systemd/relay-host.service", "host", "relay-host", "relay-host"},
	} {
		u := unit(t, c.unit)
		require.Equal(t, []string{c.user}, u["User"], c.unit)
		require.Equal(t, []string{c.state}, u["StateDirectory"], c.unit)
		require.Equal(t, []string{"0700"}, u["StateDirectoryMode"], c.unit)
		require.Equal(t, []string{"strict"}, u["ProtectSystem"], c.unit)
		require.Equal(t, []string{"yes"}, u["NoNewPrivileges"], c.unit)
		require.Equal(t, []string{"yes"}, u["ProtectHome"], c.unit)
		require.Equal(t, []string{"/bin/kill -HUP $MAINPID"}, u["ExecReload"], c.unit)
		require.Contains(t, u["RestartPreventExitStatus"][0], "2", c.unit)
		require.True(t, strings.HasPrefix(u["ExecStart"][0], "/usr/local/bin/"+c.binary+" "), c.unit)
	}
	require.Equal(t, []string{"mixed"}, unit(t, "systemd/relay-host.service")["KillMode"],
		"SIGTERM to the host alone, so its handlers get their grace")

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units were checked by this test alone")
	}
	// verify wants the ExecStart binary to exist: the release's, in copies of the units.
	dir := t.TempDir()
	var units []string
	for _, name := range []string{"cloud", "host"} {
		b, err := os.ReadFile("systemd/relay-" + name + ".service")
		require.NoError(t, err)
		p := filepath.Join(dir, "relay-"+name+".service")
		require.NoError(t, os.WriteFile(p, bytes.ReplaceAll(b, []byte("/usr/local/bin/"+name), []byte(bin(name))), 0o600))
		units = append(units, p)
	}
	out, err := exec.Command(sa, append([]string{"verify"}, units...)...).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify has nothing to say")
	for _, p := range units {
		out, err := exec.Command(sa, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
		require.NoError(t, err, string(out))
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindStringSubmatch(string(out))
		require.NotNil(t, m, string(out))
		score, _ := strconv.ParseFloat(m[1], 64)
		require.Less(t, score, 2.0, "%s: exposure %s", filepath.Base(p), m[1])
	}
}

// guideEnv is the one-box guide's /etc/relay/cloud.env (docs/deploy.md),
// under the unit's own Environment= lines, as systemd would give them to
// cloud serve.
func guideEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range unit(t, "systemd/relay-cloud.service")["Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "deploy.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)cat > /etc/relay/cloud\.env <<ENV\n(.*?)\n\s*ENV\n`).FindSubmatch(doc)
	require.NotNil(t, m, "the guide writes /etc/relay/cloud.env")
	for _, l := range strings.Split(string(m[1]), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		require.True(t, ok, l)
		if v == "$(head -c 32 /dev/urandom | base64)" {
			v = "guide-admin-token-of-at-least-32-characters"
		}
		env[k] = v
	}
	return env
}

// TestOneBoxGuide runs cloud serve with the settings the one-box guide
// gives it, as far as that goes without the internet: its ports moved to
// free ones, /var/lib/relay-cloud to a temporary directory, and ACME's
// certificate found in the cache (where the CA's would be) rather than
// fetched. The relay then answers the guide's checks: /readyz over HTTPS
// for the domain, and a 308 from HTTP to https://relay.example.com/readyz.
func TestOneBoxGuide(t *testing.T) {
	env := guideEnv(t)
	require.Equal(t, ":443", env["RELAY_LISTEN"])
	require.Equal(t, ":80", env["RELAY_HTTP_REDIRECT_LISTEN"])
	domain := env["RELAY_ACME_DOMAINS"]
	require.Equal(t, "https://"+domain, env["RELAY_PUBLIC_URL"])

	state := t.TempDir()
	for k, v := range env {
		env[k] = strings.ReplaceAll(v, "/var/lib/relay-cloud", state)
	}
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return l.Addr().String()
	}
	httpsAddr, httpAddr := free(), free()
	env["RELAY_LISTEN"], env["RELAY_HTTP_REDIRECT_LISTEN"] = httpsAddr, httpAddr
	env["RELAY_ACME_DIRECTORY_URL"] = "https://127.0.0.1:1/directory" // never called
	leaf := (*tlstest.CA)(nil).Issue(t, domain)
	require.NoError(t, os.MkdirAll(filepath.Join(state, "acme"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(state, "acme", domain), append(bytes.Clone(leaf.KeyPEM), leaf.CertPEM...), 0o600))
	var list []string
	for k, v := range env {
		list = append(list, k+"="+v)
	}

	_, log, done := startServe(t, list)

	roots := x509.NewCertPool()
	roots.AddCert(leaf.Cert)
	client := &http.Client{
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if strings.HasSuffix(addr, ":443") {
					addr = httpsAddr
				} else {
					addr = httpAddr
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + domain + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			require.JSONEq(t, `{"status":"ok"}`, string(b))
			break
		}
		select {
		case <-done:
			t.Fatalf("cloud exited:\n%s", log.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no HTTPS answer: %v\n%s", err, log.String())
		time.Sleep(100 * time.Millisecond) // polling a real process's start-up
	}
	resp, err := client.Get("http://" + domain + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusPermanentRedirect, resp.StatusCode)
	require.Equal(t, "https://"+domain+"/readyz", resp.Header.Get("Location"))

	out, err := runBin(t, list, "cloud", "health")
	require.NoError(t, err, "the health check speaks HTTPS to the ACME domain's certificate: %s", out)
	fi, err := os.Stat(filepath.Join(state, "cloud.db"))
	require.NoError(t, err, "the database is in the unit's state directory")
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// syncBuffer is a process's output, written by the process's copier while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe starts `cloud serve` with env added to this process's, its
// output in log; done closes when it exits, and the test's end kills it.
func startServe(t *testing.T, env []string) (cmd *exec.Cmd, log *syncBuffer, done chan struct{}) {
	t.Helper()
	cmd = exec.Command(bin("cloud"), "serve")
	cmd.Env = append(os.Environ(), env...)
	log = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	return cmd, log, done
}
