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
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/host/summary"
	"github.com/relaykit/relay/shared"
)

// ExecOptions configures an Exec handler.
type ExecOptions struct {
	Argv             []string // program and arguments; no shell is involved
	Timeout          time.Duration
	RetryNonzeroExit bool // is a non-zero exit retryable?
}

// Exec runs a program per webhook: the raw body on stdin, the metadata in the
// environment (see Env). Exit 0 is success. On timeout the program's whole
// process group is killed.
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

// Env is what a job adds to the program's environment: RELAY_DELIVERY_ID,
// RELAY_SOURCE, RELAY_EVENT_TYPE, RELAY_EVENT_ACTION, RELAY_ATTEMPT,
// RELAY_CORRELATION_ID, IDEMPOTENCY_KEY, RELAY_SUMMARY, TRACEPARENT (the
// W3C trace context, when the webhook carries one), RELAY_REPLAY_OF (on a
// replay: the delivery it replays), RELAY_GROUP (on a group's webhook:
// the group) and the summary's
// fields (RELAY_GITHUB_REPO, RELAY_SLACK_THREAD_TS, …). No value holds a
// NUL or more than 4 KiB, and the summary's fields stop where the job's
// variables would pass 64 KiB, so the program always starts.
func Env(job Job) []string {
	w := job.Webhook
	id := safeID(w.DeliveryID)
	env := []string{
		"RELAY_DELIVERY_ID=" + id,
		"RELAY_SOURCE=" + safeID(w.Source),
		"RELAY_EVENT_TYPE=" + envValue(w.EventType),
		"RELAY_EVENT_ACTION=" + envValue(w.EventAction),
		"RELAY_ATTEMPT=" + strconv.Itoa(w.Attempt),
		"RELAY_CORRELATION_ID=" + envValue(w.CorrelationID),
		"IDEMPOTENCY_KEY=" + id,
		"RELAY_SUMMARY=" + envValue(job.Summary.Text),
	}
	if tp := w.Headers[shared.HeaderTraceParent]; shared.TraceIDOf(tp) != "" {
		env = append(env, "TRACEPARENT="+tp)
	}
	if of := w.Headers[replayOfKey]; of != "" {
		env = append(env, "RELAY_REPLAY_OF="+safeID(of))
	}
	if g := w.Headers[groupKey]; g != "" {
		env = append(env, "RELAY_GROUP="+safeID(g))
	}
	size := 0
	for _, kv := range env {
		size += len(kv) + 1
	}
	for _, kv := range job.Summary.Env() {
		name, v, _ := strings.Cut(kv, "=")
		kv = name + "=" + envValue(v)
		if size += len(kv) + 1; size > maxJobEnv {
			break
		}
		env = append(env, kv)
	}
	return env
}

// replayOfKey and groupKey are shared.HeaderReplayOf and
// shared.HeaderGroup as a webhook's headers hold them.
var (
	replayOfKey = strings.ToLower(shared.HeaderReplayOf)
	groupKey    = strings.ToLower(shared.HeaderGroup)
)

// inherited is the host's own environment without the variables a job sets,
// so that a field a webhook lacks is absent rather than inherited.
func inherited() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "RELAY_DELIVERY_ID", "RELAY_SOURCE", "RELAY_EVENT_TYPE", "RELAY_EVENT_ACTION", "RELAY_ATTEMPT",
			"RELAY_CORRELATION_ID", "IDEMPOTENCY_KEY", "RELAY_SUMMARY", "TRACEPARENT", "RELAY_REPLAY_OF", "RELAY_GROUP":
			continue
		}
		drop := false
		for _, p := range summary.EnvPrefixes {
			drop = drop || strings.HasPrefix(name, p)
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

// Handle runs the program for the job.
func (e *Exec) Handle(ctx context.Context, job Job) Outcome {
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, e.opts.Argv[0], e.opts.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(job.Webhook.RawBody)
	out := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(inherited(), Env(job)...)
	ownProcessGroup(cmd)
	// Children that keep stdout open must not hold Wait forever.
	cmd.WaitDelay = 2 * time.Second

	err := cmd.Run()
	o := Outcome{Output: tail(out.Bytes(), MaxOutput)}
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() >= 0 {
		code := cmd.ProcessState.ExitCode()
		o.ExitCode = &code
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		o.OK = true
		return o
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Retryable, o.Error = true, fmt.Sprintf("timeout after %s: process group killed", e.opts.Timeout)
		o.ExitCode = nil
	case errors.Is(ctx.Err(), context.Canceled):
		o.Retryable, o.Error = true, "canceled: host shutting down"
		o.ExitCode = nil
	case errors.As(err, &exitErr):
		o.Retryable, o.Error = e.opts.RetryNonzeroExit, exitErr.String() // "exit status 3", "signal: killed"
		if o.ExitCode != nil {
			o.Error = fmt.Sprintf("exit %d", *o.ExitCode)
		}
		if s := lastLine(o.Output); s != "" {
			o.Error += ": " + s
		}
	default:
		// The program could not be started (missing, not executable): the
		// operator can fix that, so the cloud may retry.
		o.Retryable, o.Error = true, fmt.Sprintf("start: %v", err)
	}
	return o
}

// tailBuffer keeps the last bytes written to it.
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
