package scripts

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// output collects what a process writes, for tests to wait on.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced at each write
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	close(o.changed)
	o.changed = make(chan struct{})
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output holds s, the process exits (done closed) or
// ctx ends; it returns the output so far and whether s is in it.
func (o *output) waitFor(ctx context.Context, done <-chan struct{}, s string) (string, bool) {
	for {
		o.mu.Lock()
		out, changed := o.buf.String(), o.changed
		o.mu.Unlock()
		if strings.Contains(out, s) {
			return out, true
		}
		select {
		case <-changed:
		case <-done:
			out = o.String()
			return out, strings.Contains(out, s)
		case <-ctx.Done():
			return out, false
		}
	}
}

// freePorts returns n distinct ports nothing listens on.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		p, err := rig.FreePort()
		require.NoError(t, err)
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports
}

// listening reports whether something accepts connections on 127.0.0.1:port.
func listening(port int) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// repoRoot is the module root; the scripts run from there, as `make` does.
// It also checks for the tools they use.
func repoRoot(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "jq", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run make run and the README's walkthrough (make test installs curl and jq)", tool)
		}
	}
	root, err := rig.RepoRoot()
	require.NoError(t, err)
	return root
}

// environ is this process's environment without the variables an outer
// make (make test) passes to sub-makes, so that a make the test runs behaves
// as one a user runs.
func environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAKE") && !strings.HasPrefix(kv, "MFLAGS=") {
			env = append(env, kv)
		}
	}
	return env
}

// started is a shell script run in a process group of its own, so that a
// test can signal it the way a terminal's Ctrl-C does and end whatever it
// left behind.
type started struct {
	cmd  *exec.Cmd
	out  *output
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

func startScript(t *testing.T, dir string, env []string, name string, args ...string) *started {
	t.Helper()
	// A signal ignored by this process stays ignored in its children, and a
	// shell cannot trap one it started with ignored (a `make test` run in
	// the background ignores SIGINT). Handling it here resets it to the
	// default in the children.
	if signal.Ignored(os.Interrupt) {
		signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	}
	s := &started{out: newOutput(), done: make(chan struct{})}
	s.cmd = exec.Command(name, args...)
	s.cmd.Dir = dir
	s.cmd.Env = append(environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, s.cmd.Start())
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		// Whatever is still running in the group (a failed test's cloud,
		// host, receiver) ends with the test.
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, s.out)
		}
	})
	return s
}

// wait waits for the script to exit and returns its exit code.
func (s *started) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(timeout):
		t.Fatalf("still running after %s; output:\n%s", timeout, s.out)
	}
	return s.cmd.ProcessState.ExitCode()
}
