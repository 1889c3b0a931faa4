package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/relaykit/relay/shared"
)

// ExecOptions configures an Exec handler.
type ExecOptions struct {
	Argv             []string // program and arguments; no shell is involved
	Timeout          time.Duration
	RetryNonzeroExit bool // is a non-zero exit retryable?
}

// Exec runs a program per webhook: the raw body on stdin, the metadata in the
// environment (RELAY_DELIVERY_ID, RELAY_SOURCE, RELAY_EVENT_TYPE,
// RELAY_EVENT_ACTION, RELAY_ATTEMPT, RELAY_CORRELATION_ID, IDEMPOTENCY_KEY).
// Exit 0 is success. On timeout the program's whole process group is killed.
type Exec struct {
	opts ExecOptions
}

// NewExec returns an Exec handler for opts.
func NewExec(opts ExecOptions) (*Exec, error) {
	if len(opts.Argv) == 0 || opts.Argv[0] == "" {
		return nil, errors.New("exec: no program")
	}
	return &Exec{opts: opts}, nil
}

// Name describes the handler for the ledger.
func (e *Exec) Name() string { return "exec " + filepath.Base(e.opts.Argv[0]) }

// Handle runs the program for w.
func (e *Exec) Handle(ctx context.Context, w shared.Webhook) Outcome {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, e.opts.Argv[0], e.opts.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(w.RawBody)
	var stdout, stderr tailBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(),
		"RELAY_DELIVERY_ID="+w.DeliveryID,
		"RELAY_SOURCE="+w.Source,
		"RELAY_EVENT_TYPE="+w.EventType,
		"RELAY_EVENT_ACTION="+w.EventAction,
		"RELAY_ATTEMPT="+strconv.Itoa(w.Attempt),
		"RELAY_CORRELATION_ID="+w.CorrelationID,
		"IDEMPOTENCY_KEY="+w.DeliveryID,
	)
	killGroupOnCancel(cmd)
	// Children that keep stdout open must not hold Wait forever.
	cmd.WaitDelay = 2 * time.Second

	err := cmd.Run()
	switch {
	case err == nil:
		o := Outcome{OK: true, Summary: "exit 0"}
		if s := snippet(stdout.Bytes()); s != "" {
			o.Summary += ": " + s
		}
		return o
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return failure(true, fmt.Sprintf("timeout after %s: process group killed", e.opts.Timeout))
	case errors.Is(ctx.Err(), context.Canceled):
		return failure(true, "canceled: host shutting down")
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		msg := fmt.Sprintf("exit %d", exitErr.ExitCode())
		if exitErr.ExitCode() < 0 {
			msg = exitErr.String()
		}
		if s := snippet(stderr.Bytes()); s != "" {
			msg += ": " + s
		}
		return failure(e.opts.RetryNonzeroExit, msg)
	}
	// The program could not be started (missing, not executable): the
	// operator can fix that, so the cloud may retry.
	return failure(true, fmt.Sprintf("start: %v", err))
}

// tailBuffer keeps the last few KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}
