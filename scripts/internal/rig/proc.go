package rig

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a binary run with its stdout and stderr appended to a log file. It
// can be killed and started again with the same arguments and environment.
// Launch and Restart wait until it is ready.
type Proc struct {
	Bin     string      // the program
	Args    []string    // its arguments
	Env     []string    // added to the current environment (later entries win)
	LogPath string      // stdout and stderr are appended here
	LogPerm os.FileMode // the log file's mode if it is created; 0o600 when zero
	// OwnGroup runs the process in a process group of its own, so that a
	// terminal's interrupt reaches only this one, which ends it; by default
	// it dies with this process instead (Linux parent-death signal).
	OwnGroup bool
	Ready    Readiness // how Launch and Restart know it is up

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
}

// Start starts the process. It fails if it is already running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("rig: %s is already running (pid %d)", p.Bin, p.cmd.Process.Pid)
	}
	perm := p.LogPerm
	if perm == 0 {
		perm = 0o600
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, perm)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = f, f
	if p.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		// The child dies with the process that started it, so an
		// interrupted run leaves nothing behind.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("rig: start %s: %w", p.Bin, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr = cmd, done, nil
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// PID is the running process's id (0 if never started).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

// Done is closed when the current process exits (nil if never started).
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the last exit's error from exec.Cmd.Wait (nil for exit 0 or
// while running).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// ExitCode is the last exit's code: 0 for success, -1 for a signal or while
// running.
func (p *Proc) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || !isClosed(p.done) {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig to the running process.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return errors.New("rig: process not running")
	}
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits for the process to be gone. It is a no-op when
// the process is not running.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It returns the exit error of a process that did not exit cleanly
// within grace (nil when it exited 0 or was not running).
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return p.ExitErr()
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("rig: %s did not exit within %s of SIGTERM; killed", p.Bin, grace)
	}
}

// procDefaults fills in what a process's config leaves empty: its listen
// address (a free loopback port) and its log path (dir/name.log).
func procDefaults(listen, logPath *string, dir, name string) error {
	if *listen == "" {
		addr, err := FreeAddr()
		if err != nil {
			return err
		}
		*listen = addr
	}
	if *logPath == "" {
		*logPath = filepath.Join(dir, name+".log")
	}
	return nil
}

// Readiness is how a started process shows it is ready: GET URL+Path
// answers 200.
type Readiness struct {
	Name   string        // the process in errors: "cloud", "host"
	URL    string        // where it answers
	Path   string        // "/readyz", "/healthz"
	Within time.Duration // how long Launch and Restart wait
}

// Launch starts the process and waits (up to Ready.Within) until it is
// ready, killing it if it is not.
func (p *Proc) Launch(ctx context.Context) error {
	if err := p.Start(); err != nil {
		return err
	}
	if err := p.WaitReady(ctx, p.Ready.Within); err != nil {
		p.Kill()
		return err
	}
	return nil
}

// Restart kills the process (SIGKILL) if it runs, starts it again with the
// same settings and waits (up to Ready.Within) until it is ready.
func (p *Proc) Restart(ctx context.Context) error {
	p.Kill()
	if err := p.Start(); err != nil {
		return err
	}
	return p.WaitReady(ctx, p.Ready.Within)
}

// WaitReady waits until Ready.URL+Ready.Path answers 200; it fails at once if
// the process exits.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	r := p.Ready
	client := &http.Client{Timeout: 2 * time.Second}
	return WaitFor(ctx, timeout, 50*time.Millisecond, r.Name+" "+r.Path, func() (bool, error) {
		if !p.Running() {
			return false, fmt.Errorf("%s exited: %v\n%s", r.Name, p.ExitErr(), p.Tail(30))
		}
		resp, err := client.Get(r.URL + r.Path)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == 200, nil
	})
}

// Tail returns the last n lines of the log.
func (p *Proc) Tail(n int) string {
	return TailFile(p.LogPath, n)
}

// TailFile returns the last n lines of a file ("" if it cannot be read).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
