package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// cpuMeter measures a process's CPU share over a stretch of time.
type cpuMeter struct {
	pid   int
	first rig.ProcSample
	err   error
}

func startCPU(p *rig.Proc) *cpuMeter {
	m := &cpuMeter{pid: p.PID()}
	m.first, m.err = rig.ReadProc(m.pid)
	return m
}

// share is the CPU used since the start, in cores (-1 if unknown).
func (m *cpuMeter) share() float64 {
	if m.err != nil {
		return -1
	}
	s, err := rig.ReadProc(m.pid)
	if err != nil {
		return -1
	}
	return rig.CPUShare(m.first, s)
}

// dbMeter measures the Postgres server's CPU (every process of it) over a
// stretch of time; nil for SQLite, which runs inside the cloud.
type dbMeter struct {
	pid   int
	at    time.Time
	ticks uint64
}

func (b *bench) startDBCPU(engine string) *dbMeter {
	if engine != "postgres" || b.pg == nil {
		return nil
	}
	pid, err := b.pg.ServerPID()
	if err != nil {
		return nil
	}
	n, err := rig.TreeCPUTicks(pid)
	if err != nil {
		return nil
	}
	return &dbMeter{pid: pid, at: time.Now(), ticks: n}
}

// usPer is the server's CPU since the start in µs per n (-1 if unknown).
func (m *dbMeter) usPer(n int) float64 {
	t := m.ticksSince()
	if t < 0 || n == 0 {
		return -1
	}
	return t / rig.ClockTicks * 1e6 / float64(n)
}

// ticksSince is the server's CPU since the start, in clock ticks (-1 if
// unknown).
func (m *dbMeter) ticksSince() float64 {
	if m == nil {
		return -1
	}
	n, err := rig.TreeCPUTicks(m.pid)
	if err != nil || n < m.ticks {
		return -1
	}
	return float64(n - m.ticks)
}

// share is the server's CPU since the start, in cores (-1 if unknown).
func (m *dbMeter) share() float64 {
	n := m.ticksSince()
	if n < 0 {
		return -1
	}
	return n / rig.ClockTicks / time.Since(m.at).Seconds()
}

// ---- 1. intake ----

// memSplit is what a cloud's resident memory is made of, read once a run
// ends: pages of files (its binary), Go's (what its runtime holds, from its
// /metrics: an upper bound, as not all of it need be resident) and the rest
// of its anonymous memory (for SQLite, its page cache and allocator). Zero
// when unknown.
type memSplit struct{ file, goMem, other int64 }

func (r *run) cloudMemory() memSplit {
	if r.cloud == nil || !r.cloud.Running() {
		return memSplit{}
	}
	s, err := rig.ReadProc(r.cloud.PID())
	if err != nil || s.RssAnon == 0 {
		return memSplit{}
	}
	goMem := r.goMemory()
	if goMem == 0 {
		return memSplit{}
	}
	return memSplit{file: s.RssFile, goMem: goMem, other: max(0, s.RssAnon-goMem)}
}

// goMemory is what the cloud's Go runtime holds, in bytes, from its
// /metrics (0 when unknown).
func (r *run) goMemory() int64 {
	ctx, cancel := context.WithTimeout(r.b.ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.cloud.Admin.URL+"/metrics", nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+r.cloud.Admin.Token)
	resp, err := r.cloud.Admin.Client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0
	}
	return goMemoryOf(string(b))
}

// goMemoryOf is what the Go runtime holds of a Prometheus text exposition:
// go_memstats_sys_bytes (all it obtained from the system: heap, stacks,
// its own structures) less go_memstats_heap_released_bytes (returned to
// it); 0 unless both are there.
func goMemoryOf(metrics string) int64 {
	var sys, released float64
	found := 0
	for _, line := range strings.Split(metrics, "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || (name != "go_memstats_sys_bytes" && name != "go_memstats_heap_released_bytes") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0
		}
		if name == "go_memstats_sys_bytes" {
			sys = f
		} else {
			released = f
		}
		found++
	}
	if found != 2 || sys < released {
		return 0
	}
	return int64(sys - released)
}

// ioMeter reads, over a stretch of work, how much of the machine sat idle
// and how much of that waited on I/O, what the database's server read from
// storage, and (Postgres) which of its tables and indexes read blocks into
// its buffer cache and how many buffers its backends wrote out themselves.
// What it could not read stays unknown (-1, nil).
type ioMeter struct {
	url        string
	pid        int // the Postgres server; 0 on SQLite
	cpu0       rig.MachineCPU
	cpuErr     error
	read0      int64
	readErr    error
	pg0        rig.PGReads
	pgErr      error
	engineName string
}

// ioFigures is what an ioMeter read, per webhook stored where it says so.
type ioFigures struct {
	idle, iowait  float64 // shares of the machine's CPU time; -1 unknown
	readKB        float64 // KiB read from storage by the server's processes a webhook; -1 unknown
	rels          []rig.RelReads
	backendWrites int64 // -1 unknown
	n             int
}

func (b *bench) startIO(engine, url string) *ioMeter {
	m := &ioMeter{url: url, engineName: engine}
	m.cpu0, m.cpuErr = rig.ReadMachineCPU()
	m.readErr, m.pgErr = errors.New("not Postgres"), errors.New("not Postgres")
	if engine == "postgres" && b.pg != nil {
		if pid, err := b.pg.ServerPID(); err == nil {
			m.pid = pid
			m.read0, m.readErr = rig.TreeReadBytes(pid)
		}
		m.pg0, m.pgErr = rig.ReadPGReads(b.ctx, url)
	}
	return m
}

// stop reads the figures since the start, for n webhooks stored.
func (m *ioMeter) stop(ctx context.Context, n int) ioFigures {
	f := ioFigures{idle: -1, iowait: -1, readKB: -1, backendWrites: -1, n: n}
	if c, err := rig.ReadMachineCPU(); err == nil && m.cpuErr == nil {
		f.idle, f.iowait = c.Shares(m.cpu0)
	}
	if n <= 0 {
		return f
	}
	if m.readErr == nil {
		if r, err := rig.TreeReadBytes(m.pid); err == nil && r >= m.read0 {
			f.readKB = float64(r-m.read0) / 1024 / float64(n)
		}
	}
	if m.pgErr == nil {
		if pg, err := rig.ReadPGReads(ctx, m.url); err == nil {
			f.rels, f.backendWrites = pg.Since(m.pg0)
		} else {
			logf("%s: the server's read statistics: %v", m.engineName, err)
		}
	}
	return f
}

// blocksText is the relations that read the most blocks into the buffer
// cache, at most k, each as blocks a webhook.
func (f ioFigures) blocksText(k int) string {
	if f.n <= 0 || f.rels == nil {
		return "–"
	}
	var total int64
	for _, r := range f.rels {
		total += r.Blocks
	}
	parts := []string{fmt.Sprintf("%.2f in all", float64(total)/float64(f.n))}
	for i, r := range f.rels {
		if i == k {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", r.Name, float64(r.Blocks)/float64(f.n)))
	}
	return strings.Join(parts, ", ")
}
