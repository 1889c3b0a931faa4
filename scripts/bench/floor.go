package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
	"github.com/relaykit/relay/shared"
	"github.com/relaykit/relay/shared/steptime"
)

// ---- the forward floor ----

// floorRow is what forwarding alone costs here: the drain's deliveries sent
// to a receiver by a plain HTTP client in a process of its own, with no
// cloud, no heartbeat and no ledger. A drain forwards each delivery the same
// way, so this rate is a ceiling for it on this machine.
type floorRow struct {
	requests, workers int
	rate              float64
	clientUS, recvUS  float64 // CPU µs per request (-1 if unknown)
	err               string
}

// floorClientArg makes the bench binary the floor's client: it is run again
// with this, the receiver's URL, the number of requests and of workers.
const floorClientArg = "-forward-floor-client"

func (b *bench) forwardFloor() floorRow {
	row := floorRow{requests: b.cfg.drainN, workers: b.cfg.drainWorkers}
	rc, err := rig.StartReceiver(rig.ReceiverOptions{})
	if err != nil {
		row.err = err.Error()
		return row
	}
	defer rc.Close()
	self, err := os.Executable()
	if err != nil {
		row.err = err.Error()
		return row
	}
	logf("forward floor: %d requests, %d at a time", row.requests, row.workers)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(b.ctx, self, floorClientArg, rc.URL, strconv.Itoa(row.requests), strconv.Itoa(row.workers), b.cfg.payloads)
	cmd.Stderr = &stderr
	self0, selfErr := rig.ReadProc(os.Getpid())
	start := time.Now()
	if err := cmd.Run(); err != nil {
		row.err = fmt.Sprintf("client: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
		return row
	}
	took := time.Since(start)
	row.recvUS = cpuPer(self0, selfErr, os.Getpid(), row.requests)
	if got := rc.Unique(); got != row.requests {
		row.err = fmt.Sprintf("the receiver got %d of %d", got, row.requests)
		return row
	}
	row.rate = float64(row.requests) / took.Seconds()
	ps := cmd.ProcessState
	row.clientUS = float64((ps.UserTime() + ps.SystemTime()).Microseconds()) / float64(row.requests)
	logf("forward floor: %.0f/s; CPU µs per request: client %.0f, receiver %.0f", row.rate, row.clientUS, row.recvUS)
	return row
}

// floorClient sends n requests to url, workers at a time, each as a host
// forwards a delivery: a payload of the mix with its provider's headers, the
// relay's own, and a key of its own.
func floorClient(args []string) error {
	if len(args) != 4 {
		return errors.New("usage: " + floorClientArg + " URL N WORKERS PAYLOADS")
	}
	url := args[0]
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	workers, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	mix, err := newMix(args[3])
	if err != nil {
		return err
	}
	client := &http.Client{Transport: newTransport(workers), Timeout: time.Minute}
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := floorSend(client, url, mix, "floor", i, false); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// floorSend posts the mix's i-th payload to url as a host forwards a
// delivery: its provider's headers, the relay's own and a key of its own
// (prefix-i); with stampSent, its send time too (shared/steptime).
func floorSend(client *http.Client, url string, mix *payloadMix, prefix string, i int64, stampSent bool) error {
	k := mix.kindOf(i)
	name := prefix + "-" + strconv.FormatInt(i, 10)
	w := k.build(name, time.Now()) // the stored headers: a host does not sign
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(w.body))
	if err != nil {
		return err
	}
	id := k.provider + ":" + name + ":1"
	req.Header = w.header
	req.Header.Set(shared.HeaderDeliveryID, id)
	req.Header.Set(shared.HeaderSource, k.provider)
	req.Header.Set(shared.HeaderAttempt, "1")
	req.Header.Set(shared.HeaderIdempotencyKey, id)
	if stampSent {
		req.Header.Set(steptime.Header, "sent="+strconv.FormatInt(time.Now().UnixNano(), 10))
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

// ---- the latency floor ----

// latencyFloorRow is what this machine charges a webhook before the relay
// does any work of its own, at an end-to-end run's rate: one HTTP request
// from a process to another (a webhook crosses three: the provider's POST,
// the push or the long poll's answer, the host's forward), and one durable
// write (the intake's commit; every webhook waits for at least one).
type latencyFloorRow struct {
	rate        float64
	hop, commit percentiles
	err         string
}

// hopFloorClientArg makes the bench binary the latency floor's client: it is
// run again with this, the receiver's URL, the rate, the number of requests
// and the payload mix.
const hopFloorClientArg = "-hop-floor-client"

// commitSize is the floor's durable write: about what the intake's commit
// of a webhook of the mix appends to SQLite's write-ahead log.
const commitSize = 16 << 10

func (b *bench) latencyFloor(rate float64) latencyFloorRow {
	row := latencyFloorRow{rate: rate}
	n := int(rate * b.cfg.e2eDuration.Seconds())
	logf("latency floor at %g/s: %d HTTP requests between two processes, %d fdatasyncs of %d KiB", rate, n, n, commitSize>>10)
	hops, err := b.hopFloor(rate, n)
	if err != nil {
		row.err = err.Error()
		return row
	}
	commits, err := b.commitFloor(rate, n)
	if err != nil {
		row.err = err.Error()
		return row
	}
	row.hop, row.commit = newPercentiles(hops), newPercentiles(commits)
	logf("latency floor: one hop p50 %s p99 %s ms; one commit p50 %s p99 %s ms", ms(row.hop.at(0.5)), ms(row.hop.at(0.99)),
		ms(row.commit.at(0.5)), ms(row.commit.at(0.99)))
	return row
}

// hopFloor sends n requests at rate from a process of its own to a receiver
// in this one, one at a time, and returns each one's time from the client's
// send to the receiver's read of the body (the clocks are the same
// machine's).
func (b *bench) hopFloor(rate float64, n int) ([]time.Duration, error) {
	rc, err := rig.StartReceiver(rig.ReceiverOptions{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(b.ctx, self, hopFloorClientArg, rc.URL, strconv.FormatFloat(rate, 'f', -1, 64), strconv.Itoa(n), b.cfg.payloads)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("hop client: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	hits := rc.Snapshot()
	if len(hits) != n {
		return nil, fmt.Errorf("the receiver got %d of %d", len(hits), n)
	}
	out := make([]time.Duration, 0, n)
	for _, h := range hits {
		steps := steptime.Parse(h.StepTimes)
		if len(steps) != 1 || steps[0].Name != "sent" {
			return nil, fmt.Errorf("a request came without its send time: %q", h.StepTimes)
		}
		out = append(out, h.First.Sub(steps[0].At))
	}
	return out, nil
}

// hopFloorClient sends n requests to url at rate, one at a time, each a
// payload of the mix with its provider's headers and its send time.
func hopFloorClient(args []string) error {
	if len(args) != 4 {
		return errors.New("usage: " + hopFloorClientArg + " URL RATE N PAYLOADS")
	}
	url := args[0]
	rate, err := strconv.ParseFloat(args[1], 64)
	if err != nil || rate <= 0 {
		return fmt.Errorf("rate %q", args[1])
	}
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	mix, err := newMix(args[3])
	if err != nil {
		return err
	}
	client := &http.Client{Transport: newTransport(1), Timeout: time.Minute}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range int64(n) {
		<-tick.C
		if err := floorSend(client, url, mix, "hop", i, true); err != nil {
			return err
		}
	}
	return nil
}

// commitFloor writes commitSize bytes to a file in the work directory (the
// databases' disk) and fdatasyncs it, n times at rate, and returns how long
// each write and sync took. The file is written in full first and then
// over, round and round, as SQLite reuses its write-ahead log after a
// checkpoint: a write that grew the file would sync its size too.
func (b *bench) commitFloor(rate float64, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(b.work, "commit-floor-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const ring = 4 << 20
	if _, err := f.Write(make([]byte, ring)); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	buf := bytes.Repeat([]byte{0xa5}, commitSize)
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	out := make([]time.Duration, 0, n)
	for i := range n {
		select {
		case <-tick.C:
		case <-b.ctx.Done():
			return nil, b.ctx.Err()
		}
		start := time.Now()
		if _, err := f.WriteAt(buf, int64(i*commitSize%ring)); err != nil {
			return nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
