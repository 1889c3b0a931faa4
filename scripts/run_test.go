package scripts

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The line scripts/run.sh prints once the cloud, the receiver and the host
// all listen, and the host has heartbeated.
const demoReady = "The relay is running."

// demoEnv is the environment of a demo on the given ports, with its state
// in a directory of its own (never the checkout's .run).
func demoEnv(state string, cloud, receiver, host int) []string {
	return []string{
		"RELAY_DEMO_DIR=" + state,
		fmt.Sprintf("RELAY_DEMO_PORT=%d", cloud),
		fmt.Sprintf("RELAY_DEMO_RECEIVER_PORT=%d", receiver),
		fmt.Sprintf("RELAY_DEMO_HOST_PORT=%d", host),
	}
}

// requireDemoUp checks what the readiness line promises: each part listens,
// and the host has heartbeated the cloud.
func requireDemoUp(t *testing.T, cloud, receiver, host int) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", cloud))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "cloud /readyz")
	require.True(t, listening(receiver), "the receiver listens on %d", receiver)
	resp, err = http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", host))
	require.NoError(t, err)
	defer resp.Body.Close()
	var health struct {
		LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	require.NotNil(t, health.LastHeartbeatAt, "the host has heartbeated")
}

// requireDemoPages checks the lines that say where the console and the
// host page are and how to log in, with the settings' ports and state
// directory, and that each page is there and the token logs in.
func requireDemoPages(t *testing.T, out, state string, cloud, host int) {
	t.Helper()
	console := fmt.Sprintf("http://127.0.0.1:%d/console/", cloud)
	tokenFile := filepath.Join(state, "admin-token")
	page := fmt.Sprintf("http://127.0.0.1:%d/", host)
	require.Contains(t, out, "    console:   "+console+"  (log in with the admin token in "+tokenFile+")\n")
	require.Contains(t, out, "    host page: "+page+"\n")

	resp, err := http.Get(page)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the host page")
	require.Contains(t, resp.Header.Get("Content-Type"), "text/html")

	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	// The login form's answer, without following it: a session cookie.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noFollow.Get(console)
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, []int{http.StatusOK, http.StatusFound, http.StatusSeeOther}, resp.StatusCode, "the console")
	req, err := http.NewRequest("POST", console+"login", strings.NewReader(url.Values{"token": {strings.TrimSpace(string(token))}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", fmt.Sprintf("http://127.0.0.1:%d", cloud))
	resp, err = noFollow.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the token in the file logs in")
	require.NotEmpty(t, resp.Cookies(), "a session")
}

func requireDemoDown(t *testing.T, ports ...int) {
	t.Helper()
	for _, p := range ports {
		require.False(t, listening(p), "nothing listens on %d after the demo stopped", p)
	}
}

// TestRunDemo runs `make run`'s script as a user does: it waits for the
// readiness line, sends the sample webhook the script suggests, sees the
// receiver print it, then stops the demo as Ctrl-C does (SIGINT to its
// process group) and expects a quiet exit 0.
func TestRunDemo(t *testing.T) {
	root := repoRoot(t)
	ports := freePorts(t, 3)
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold build included
	defer cancel()

	s := startScript(t, root, demoEnv(state, ports[0], ports[1], ports[2]), "scripts/run.sh")
	out, ok := s.out.waitFor(ctx, s.done, demoReady)
	require.True(t, ok, "no readiness line; output:\n%s", out)
	requireDemoUp(t, ports[0], ports[1], ports[2])
	require.NotContains(t, out, "run:", "no error before readiness")
	requireDemoPages(t, out, state, ports[0], ports[2])

	// The command the script prints, as printed.
	var send string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "bin/send-sample ") {
			send = strings.TrimSpace(line)
		}
	}
	require.NotEmpty(t, send, "the script prints the send-sample command")
	cmd := exec.CommandContext(ctx, "sh", "-c", send)
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	answer, err := cmd.Output()
	require.NoError(t, err, "%s: %s", send, stderr.String())
	var accepted struct {
		DeliveryID string `json:"delivery_id"`
		Status     string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(answer, &accepted), "%s", answer)
	require.Equal(t, "queued", accepted.Status)

	// The receiver's line names the delivery.
	_, ok = s.out.waitFor(ctx, s.done, "receiver: POST /github  delivery="+accepted.DeliveryID)
	require.True(t, ok, "the receiver printed delivery %s", accepted.DeliveryID)

	require.NoError(t, syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT))
	require.Equal(t, 0, s.wait(t, time.Minute), "exit code after SIGINT")
	out = s.out.String()
	require.Contains(t, out, "==> stopped")
	require.NotContains(t, out, "run:", "a normal stop says nothing of errors")
	requireDemoDown(t, ports...)
	require.Equal(t, 1, strings.Count(out, "receiver: POST"), "one webhook, received once")
}

// TestRunDemoBusyPort: a port already taken stops the demo before it
// builds or starts anything, naming the variable that moves the port.
func TestRunDemoBusyPort(t *testing.T) {
	root := repoRoot(t)
	for i, name := range []string{"RELAY_DEMO_PORT", "RELAY_DEMO_RECEIVER_PORT", "RELAY_DEMO_HOST_PORT"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer l.Close()
			ports := freePorts(t, 3)
			ports[i] = l.Addr().(*net.TCPAddr).Port
			state := t.TempDir()

			s := startScript(t, root, demoEnv(state, ports[0], ports[1], ports[2]), "scripts/run.sh")
			require.Equal(t, 1, s.wait(t, time.Minute))
			out := s.out.String()
			require.Contains(t, out, fmt.Sprintf("run: port %d is in use; set %s to another port", ports[i], name))
			require.NotContains(t, out, "==>", "nothing built, started or announced")
			entries, err := os.ReadDir(state)
			require.NoError(t, err)
			require.Empty(t, entries, "no state written")
		})
	}
}

// TestRunDemoPortTakenLate: a port that passes the script's check (bound,
// not yet listening) but that the receiver then cannot bind stops the demo
// before its readiness line, naming the variable, with nothing left running.
func TestRunDemoPortTakenLate(t *testing.T) {
	root := repoRoot(t)
	ports := freePorts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A socket bound to the receiver's port without SO_REUSEADDR and not
	// listening: connecting is refused, binding it again fails.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Port: ports[1], Addr: [4]byte{127, 0, 0, 1}}))

	s := startScript(t, root, demoEnv(t.TempDir(), ports[0], ports[1], ports[2]), "scripts/run.sh")
	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatalf("still running; output:\n%s", s.out)
	}
	require.Equal(t, 1, s.cmd.ProcessState.ExitCode())
	out := s.out.String()
	require.Contains(t, out, "run: the demo receiver exited before it was ready (a port in use? set RELAY_DEMO_RECEIVER_PORT to move it)")
	require.NotContains(t, out, demoReady)
	requireDemoDown(t, ports[0], ports[2])
}

// TestMakeRunCtrlC runs `make run` on a terminal and presses Ctrl-C: make
// itself must exit 0 and print nothing of an interrupt (make reports
// "Interrupt" and exits 130 whenever the terminal's SIGINT reaches it).
func TestMakeRunCtrlC(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	master, slave, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer master.Close()
	root := repoRoot(t)
	ports := freePorts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cmd := exec.Command("make", "run")
	cmd.Dir = root
	cmd.Env = append(environ(), demoEnv(t.TempDir(), ports[0], ports[1], ports[2])...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	slave.Close()
	out := newOutput()
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return // EIO once every process holding the terminal is gone
			}
		}
	}()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		// A failed test leaves the terminal's foreground job (the demo)
		// and make behind: end both.
		if pgrp, err := foregroundPgrp(master); err == nil && pgrp > 0 {
			_ = syscall.Kill(-pgrp, syscall.SIGKILL)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("make run output:\n%s", out)
		}
	}()

	got, ok := out.waitFor(ctx, done, "Ctrl-C stops everything.")
	require.True(t, ok, "no readiness; output:\n%s", got)
	require.Contains(t, got, demoReady)
	requireDemoUp(t, ports[0], ports[1], ports[2])

	_, err = master.Write([]byte{3}) // Ctrl-C
	require.NoError(t, err)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("make run still running after Ctrl-C")
	}
	require.Equal(t, 0, cmd.ProcessState.ExitCode(), "make run's exit code")
	select {
	case <-read: // every process that held the terminal is gone
	case <-ctx.Done():
		t.Fatal("a process still holds make run's terminal")
	}
	got = out.String()
	require.Contains(t, got, "==> stopped")
	require.NotRegexp(t, `make(\[\d+\])?: \*\*\*`, got)
	require.NotContains(t, got, "run:")
	requireDemoDown(t, ports...)
}

// TestMakeRunGroupInterrupt: a SIGINT to the whole process group of `make
// run` when no terminal runs it (kill -INT -PGID, as a terminal signals
// its foreground job) stops the demo as Ctrl-C does, and the script exits
// 0; GNU make, interrupted itself, dies of the signal once the script has
// exited (130 in a shell), as the README says.
func TestMakeRunGroupInterrupt(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	root := repoRoot(t)
	ports := freePorts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	s := startScript(t, root, demoEnv(t.TempDir(), ports[0], ports[1], ports[2]), "make", "--no-print-directory", "run")
	out, ok := s.out.waitFor(ctx, s.done, "Ctrl-C stops everything.")
	require.True(t, ok, "no readiness; output:\n%s", out)
	requireDemoUp(t, ports[0], ports[1], ports[2])

	require.NoError(t, syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT))
	s.wait(t, time.Minute)
	ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGINT, "make dies of SIGINT (130 in a shell): %v", ws)
	out = s.out.String()
	require.Contains(t, out, "==> stopped", "the script stopped the demo and exited 0")
	require.NotContains(t, out, "run: ", "no error of the script's")
	requireDemoDown(t, ports...)
}

// TestRunDemoSettingsDocumented: every RELAY_DEMO_ variable the script reads
// is in the README, and the README names none the script does not read.
func TestRunDemoSettingsDocumented(t *testing.T) {
	root := repoRoot(t)
	script, err := os.ReadFile(filepath.Join(root, "scripts", "run.sh"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	read := demoVars(string(script))
	require.NotEmpty(t, read)
	require.Equal(t, read, demoVars(string(readme)))
}

func demoVars(s string) map[string]bool {
	vars := map[string]bool{}
	for i := strings.Index(s, "RELAY_DEMO_"); i >= 0; i = strings.Index(s, "RELAY_DEMO_") {
		s = s[i:]
		n := len("RELAY_DEMO_")
		for n < len(s) && (s[n] == '_' || s[n] >= 'A' && s[n] <= 'Z') {
			n++
		}
		vars[s[:n]] = true
		s = s[n:]
	}
	delete(vars, "RELAY_DEMO_JOB") // the script's own marker, not a setting
	return vars
}

// TestRunDemoBadPort: a port setting that is not a port stops the demo with
// exit code 2, naming the variable.
func TestRunDemoBadPort(t *testing.T) {
	root := repoRoot(t)
	ports := freePorts(t, 3)
	env := append(demoEnv(t.TempDir(), ports[0], ports[1], ports[2]), "RELAY_DEMO_HOST_PORT=70710")
	s := startScript(t, root, env, "scripts/run.sh")
	require.Equal(t, 2, s.wait(t, time.Minute))
	require.Contains(t, s.out.String(), `run: RELAY_DEMO_HOST_PORT: invalid port "70710"`)
}
