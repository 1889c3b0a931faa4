package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/relaykit/relay/scripts/internal/rig"
)

// rssWatch samples a process's memory every 100 ms, notes when its RSS
// first passes bound and calls abort once when it passes limit.
type rssWatch struct {
	done chan struct{}
	quit chan struct{}
	once sync.Once

	mu      sync.Mutex
	peak    int64     // the largest VmHWM or VmRSS read
	now     int64     // the last VmRSS read
	over    time.Time // the first sample over the bound
	aborted rssAbort
}

// rssAbort is when the RSS passed the limit, and what it was.
type rssAbort struct {
	at  time.Time
	rss int64
}

func watchRSS(pid int, bound, limit int64, abort func()) *rssWatch {
	w := &rssWatch{done: make(chan struct{}), quit: make(chan struct{})}
	sample := func() {
		p, err := rig.ReadProc(pid)
		if err != nil {
			return // gone: the scenario notices
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.peak, w.now = max(w.peak, p.VmHWM, p.VmRSS), p.VmRSS
		if w.peak >= bound && w.over.IsZero() {
			w.over = time.Now()
		}
		if p.VmRSS > limit && w.aborted.at.IsZero() {
			w.aborted.at, w.aborted.rss = time.Now(), p.VmRSS
			abort()
		}
	}
	sample()
	go func() {
		defer close(w.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return w
}

func (w *rssWatch) current() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// stop ends the sampling; it returns the peak, when the bound was first
// passed (zero: never) and, if the limit was passed, when and at what RSS.
func (w *rssWatch) stop() (peak int64, over time.Time, aborted rssAbort) {
	w.once.Do(func() { close(w.quit); <-w.done })
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, w.over, w.aborted
}

// filesSize is the size of the files in dir whose names start with prefix
// (a SQLite database with its -wal and -shm).
func filesSize(dir, prefix string) int64 {
	entries, _ := os.ReadDir(dir)
	var n int64
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			n += fileSize(filepath.Join(dir, e.Name()))
		}
	}
	return n
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// pct is the p-th percentile of ds ("–" when empty).
func pct(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, int(float64(len(s))*p/100))
	d := s[i]
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
