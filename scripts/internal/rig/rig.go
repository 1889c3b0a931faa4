// Package rig starts and drives real relay processes for the benchmark
// (scripts/bench) and the fault suite (scripts/chaos): it builds the `cloud`
// and `host` binaries once, runs a throwaway Postgres through
// scripts/pgtest.sh, starts `cloud serve` and `host run` processes with their
// logs in files, talks to the cloud's admin and host APIs, signs GitHub
// webhooks, runs a local receiver that records what the host forwards, and
// samples processes' CPU and memory from /proc.
//
// It is not a test package: every function returns its error, and every
// process or server it starts is ended by its Stop, Kill or Close.
package rig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// RepoRoot returns the module root: the nearest directory at or above the
// working directory that holds go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("rig: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Bins are the built binaries.
type Bins struct {
	Dir   string // the directory holding them
	Cloud string // path of the cloud binary
	Host  string // path of the host binary
}

// Build builds cloud and host into dir as a release does
// (`scripts/release.sh --flat --out dir`, in the module root) and returns
// the binaries' paths. Build output goes to the returned error on failure.
func Build(ctx context.Context, root, dir string) (*Bins, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// As make build and make release build them: what is measured is what
	// ships.
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "release.sh"), "--flat", "--out", abs)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("rig: scripts/release.sh: %w\n%s", err, out)
	}
	return &Bins{Dir: abs, Cloud: filepath.Join(abs, "cloud"), Host: filepath.Join(abs, "host")}, nil
}

// FreeAddr returns a 127.0.0.1:PORT address nothing listens on at the moment
// of the call.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// FreePort returns a TCP port on 127.0.0.1 nothing listens on at the moment
// of the call.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// WaitFor calls cond every interval until it returns true, returns an error,
// or ctx or the timeout ends; what names the condition in the error.
func WaitFor(ctx context.Context, timeout, interval time.Duration, what string, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("rig: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rig: timed out after %s waiting for %s", timeout, what)
		case <-t.C:
		}
	}
}

// WorkDir returns the module's root and a new temporary work directory
// named after prefix, which Postgres — run as an unprivileged user when we
// are root — can reach.
func WorkDir(prefix string) (root, work string, err error) {
	if root, err = RepoRoot(); err != nil {
		return "", "", err
	}
	if work, err = os.MkdirTemp("", prefix); err != nil {
		return "", "", err
	}
	_ = os.Chmod(work, 0o755)
	return root, work, nil
}
