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
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
	"github.com/relaykit/relay/shared"
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
				if err := floorSend(client, url, mix, i); err != nil {
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

func floorSend(client *http.Client, url string, mix *payloadMix, i int64) error {
	k := mix.kindOf(i)
	w := k.build("floor-"+strconv.FormatInt(i, 10), time.Now()) // the stored headers: a host does not sign
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(w.body))
	if err != nil {
		return err
	}
	id := k.provider + ":floor-" + strconv.FormatInt(i, 10) + ":1"
	req.Header = w.header
	req.Header.Set(shared.HeaderDeliveryID, id)
	req.Header.Set(shared.HeaderSource, k.provider)
	req.Header.Set(shared.HeaderAttempt, "1")
	req.Header.Set(shared.HeaderIdempotencyKey, id)
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
